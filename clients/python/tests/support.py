"""Real workers for the tests: the cfdb-worker binary (CFDB_WORKER_BINARY)
started on a free port, and a test PKI made with the openssl command."""
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

BINARY = os.environ.get("CFDB_WORKER_BINARY", "build/cfdb-worker")


class Worker:
    """`cfdb-worker serve --port 0 ARGS`, its port read from its log. The
    log is collected as it comes; stop() ends the process."""

    def __init__(self, *args):
        self.process = subprocess.Popen(
            [BINARY, "serve", "--port", "0", "--idle-timeout-seconds", "0",
             "--max-lifetime-jitter-seconds", "0", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.log = ""
        self._listening = threading.Event()
        self.port = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._listening.wait(30) or self.port is None:
            self.kill()
            raise RuntimeError(f"the worker did not start:\n{self.log}")

    def _read(self):
        for line in self.process.stderr:
            self.log += line
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._listening.set()
        self.process.stderr.close()
        self._listening.set()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def wait(self, timeout=30):
        return self.process.wait(timeout)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._reader.join(5)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


class Pki:
    """A CA and leaf certificates (P-256) with the SANs given, in a private
    directory removed by close()."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cfdb-py-pki-")
        self.ca = self._path("ca")
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                      "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                      "-subj", "/CN=cfdb python test CA",
                      "-keyout", self.ca[1], "-out", self.ca[0])

    def _path(self, name):
        return (os.path.join(self.dir, f"{name}.pem"),
                os.path.join(self.dir, f"{name}.key"))

    def _openssl(self, *args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def leaf(self, name, sans):
        """(cert, key) paths of a leaf for SANs like "DNS:x", "IP:127.0.0.1"."""
        cert, key = self._path(name)
        csr = os.path.join(self.dir, f"{name}.csr")
        ext = os.path.join(self.dir, f"{name}.ext")
        with open(ext, "w") as f:
            f.write(f"subjectAltName={','.join(sans)}\n"
                    "basicConstraints=CA:FALSE\n")
        self._openssl("req", "-newkey", "ec", "-pkeyopt",
                      "ec_paramgen_curve:P-256", "-nodes", "-subj",
                      f"/CN={name}", "-keyout", key, "-out", csr)
        self._openssl("x509", "-req", "-in", csr, "-CA", self.ca[0],
                      "-CAkey", self.ca[1], "-CAcreateserial", "-days", "1",
                      "-extfile", ext, "-out", cert)
        os.chmod(key, 0o600)
        return cert, key

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)
