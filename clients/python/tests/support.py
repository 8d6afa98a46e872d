"""Real workers for the tests: the cfdb-worker binary (CFDB_WORKER_BINARY)
started on a free port, and a test PKI made with the openssl command."""
import asyncio
import faulthandler
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc

BINARY = os.environ.get("CFDB_WORKER_BINARY", "build/cfdb-worker")

# Every worker a test started and has not killed yet.
_LIVE_WORKERS = set()


def _watchdog():
    """A suite that hangs prints every thread's stack, kills its workers
    and ends, before ctest's bound would end it without a word (and leave
    its workers running)."""
    faulthandler.dump_traceback(all_threads=True)
    for process in list(_LIVE_WORKERS):
        process.kill()
    os._exit(1)


if os.environ.get("CFDB_TEST_WATCHDOG_SECONDS"):  # tests/CMakeLists.txt
    _timer = threading.Timer(
        float(os.environ["CFDB_TEST_WATCHDOG_SECONDS"]), _watchdog)
    _timer.daemon = True
    _timer.start()
    # The backstop, should the timer never get the GIL (a call into C that
    # holds it): faulthandler's own thread dumps the stacks and exits 30 s
    # later, still before ctest's bound. It cannot kill the workers.
    faulthandler.dump_traceback_later(
        float(os.environ["CFDB_TEST_WATCHDOG_SECONDS"]) + 30, exit=True)


class Failed(grpc.RpcError):
    """A failed call as grpc raises it: a code and its details."""

    def __init__(self, code, details):
        super().__init__()
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class Worker:
    """`cfdb-worker serve --port 0 ARGS`, its port read from its log. The
    log is collected as it comes; stop() ends the process."""

    def __init__(self, *args):
        # No idle retirement unless the test asks for it.
        idle = () if "--idle-timeout-seconds" in args else (
            "--idle-timeout-seconds", "0")
        self.process = subprocess.Popen(
            [BINARY, "serve", "--port", "0", *idle,
             "--max-lifetime-jitter-seconds", "0", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        _LIVE_WORKERS.add(self.process)
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
        _LIVE_WORKERS.discard(self.process)
        self._reader.join(5)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# The one test PKI script of the repository (also image-test's, Node's and
# the bench's); it logs each key for tests/support/tmp_audit.sh.
PKI_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "..", "..", "..", "scripts", "test-pki.sh")


class Pki:
    """A CA and leaf certificates (P-256) with the SANs given, in a private
    directory removed by close()."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cfdb-py-pki-")
        self._pki("ca", "cfdb python test CA")
        self.ca = self._path("ca")

    def _path(self, name):
        return (os.path.join(self.dir, f"{name}.pem"),
                os.path.join(self.dir, f"{name}.key"))

    def _pki(self, *args):
        subprocess.run([PKI_SCRIPT, self.dir, *args], check=True)

    def leaf(self, name, sans):
        """(cert, key) paths of a leaf for SANs like "DNS:x", "IP:127.0.0.1"."""
        self._pki("leaf", name, ",".join(sans))
        return self._path(name)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class TcpProxy:
    """A TCP proxy on a free port to `target_port`: cut() closes every
    connection through it (as a lost network would), and it keeps
    accepting new ones. After hold_replies(), until the next cut, what the
    worker sends on a new connection after its first read (its HTTP/2
    SETTINGS, with which the client's channel gets ready and sends its
    call) is held back, e.g. a dispatch's Accepted."""

    def __init__(self, target_port):
        self.target_port = target_port
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets = []
        self._hold = False
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1",
                                                 self.target_port))
            with self._lock:
                self._sockets += [client, upstream]
                hold = self._hold
            for a, b, held in ((client, upstream, False),
                               (upstream, client, hold)):
                threading.Thread(target=self._pipe, args=(a, b, held),
                                 daemon=True).start()

    def hold_replies(self):
        with self._lock:
            self._hold = True

    @staticmethod
    def _pipe(source, sink, held):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
                while held and source.recv(65536):
                    pass  # held back: dropped until the cut
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self._lock:
            sockets, self._sockets = self._sockets, []
            self._hold = False
            self.cuts += 1
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self._listener.close()
        self.cut()


# Test fixtures (mixins of a unittest.TestCase): a real worker per test over
# one transport, with address(), credentials() (cfdb_worker.Credentials or
# None) and client_env() (what a child process needs to dial it).
class PlaintextWorker:
    def setUp(self):
        self.worker = Worker()
        self.addCleanup(self.worker.kill)

    def run(self, result=None):
        """Runs the test; if it fails, prints its worker's log after it, as
        the C++ tests' Daemon does."""
        def failed():
            return len(result.failures) + len(result.errors)
        before = failed() if result is not None else 0
        ran = super().run(result)
        worker = getattr(self, "worker", None)
        if result is not None and failed() > before and worker is not None:
            sys.stderr.write(f"--- the worker's log ({self.id()}):\n"
                             f"{worker.log}--- end of the worker's log\n")
        return ran

    def address(self):
        return self.worker.address

    def credentials(self, pem=None, identity=None):
        return None

    def client_env(self):
        return {}


class UnixSocketWorker(PlaintextWorker):
    def setUp(self):
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.path = os.path.join(directory.name, "worker.sock")
        self.worker = Worker("--uds", self.path)
        self.addCleanup(self.worker.kill)

    def address(self):
        return f"unix:{self.path}"


class MutualTlsWorker(PlaintextWorker):
    """A worker that admits api.cfdb.internal to control it and
    worker.cfdb.internal to observe it; the client is api.cfdb.internal
    unless credentials() is given another pem (stranger_pem: no one)."""

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()
        cls.worker_pem = cls.pki.leaf(
            "worker", ["DNS:worker.cfdb.internal", "IP:127.0.0.1"])
        cls.api_pem = cls.pki.leaf("api", ["DNS:api.cfdb.internal"])
        cls.stranger_pem = cls.pki.leaf("stranger", ["DNS:stranger"])

    @classmethod
    def tearDownClass(cls):
        cls.pki.close()

    def setUp(self):
        self.worker = Worker(
            "--tls-ca", self.pki.ca[0], "--tls-cert", self.worker_pem[0],
            "--tls-key", self.worker_pem[1],
            "--tls-admit-control", "api.cfdb.internal",
            "--tls-admit-observe", "worker.cfdb.internal")
        self.addCleanup(self.worker.kill)

    def credentials(self, pem=None, identity=None):
        from cfdb_worker import Credentials
        cert, key = pem or self.api_pem
        return Credentials.from_files(self.pki.ca[0], cert, key, identity)

    def client_env(self):
        return {"TEST_TLS_FILES": os.pathsep.join(
            (self.pki.ca[0], *self.api_pem))}


class _LoopThread:
    """One event loop on a thread of its own for the whole test process
    (grpc.aio wants one loop at a time)."""

    loop = None

    @classmethod
    def run(cls, coroutine):
        if cls.loop is None:
            cls.loop = asyncio.new_event_loop()
            threading.Thread(target=cls.loop.run_forever, daemon=True,
                             name="aio-tests").start()
        return asyncio.run_coroutine_threadsafe(coroutine, cls.loop).result()


class AsyncAsBlocking:
    """cfdb_worker.aio.AsyncWorkerConnection behind the blocking client's
    surface, each call run on the tests' loop thread: one test body checks
    both clients, call for call."""

    _ITERATORS = ("events", "attach_events")

    def __init__(self, address, credentials=None):
        from cfdb_worker.aio import AsyncWorkerConnection

        async def make():
            return AsyncWorkerConnection(address, credentials)
        self._connection = _LoopThread.run(make())

    def __getattr__(self, name):
        method = getattr(self._connection, name)
        if name in self._ITERATORS:
            return lambda *args, **kwargs: self._iterate(
                method(*args, **kwargs))
        return lambda *args, **kwargs: _LoopThread.run(method(*args,
                                                              **kwargs))

    @staticmethod
    def _iterate(events):
        try:
            while True:
                try:
                    yield _LoopThread.run(events.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            _LoopThread.run(events.aclose())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _LoopThread.run(self._connection.close())


# Which client a test uses (a mixin): open() makes its connection.
class BlockingClient:
    def open(self, address, credentials=None):
        from cfdb_worker import WorkerConnection
        return WorkerConnection(address, credentials)

    def client_kind(self):
        return "blocking"


class AsyncClient:
    def open(self, address, credentials=None):
        return AsyncAsBlocking(address, credentials)

    def client_kind(self):
        return "aio"


def test_cases(namespace, plaintext, unix_socket=None, mutual_tls=None):
    """Defines in `namespace` (a module's globals()) a unittest.TestCase per
    client and transport: PlaintextTest, UnixSocketTest, MutualTlsTest from
    the blocking client, AioPlaintextTest... from the asyncio one, each
    running the tests of its mixin (unix_socket and mutual_tls default to
    plaintext's)."""
    import unittest
    transports = (("Plaintext", PlaintextWorker, plaintext),
                  ("UnixSocket", UnixSocketWorker, unix_socket or plaintext),
                  ("MutualTls", MutualTlsWorker, mutual_tls or plaintext))
    for prefix, client in (("", BlockingClient), ("Aio", AsyncClient)):
        for name, fixture, tests in transports:
            full = f"{prefix}{name}Test"
            namespace[full] = type(full, (client, fixture, tests,
                                          unittest.TestCase),
                                   {"__module__": namespace["__name__"]})
