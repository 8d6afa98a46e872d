"""The package as a user installs it: a wheel built offline with Debian's
tools holds the sources, py.typed and the generated modules, installs into
a venv that sees Debian's grpcio, and imports there; its build refuses a
protobuf runtime older than the protoc that generates the modules."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
sys.path.insert(0, PACKAGE)
import generate  # noqa: E402


class PackagingTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cfdb-py-package-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def test_a_wheel_built_offline_installs_and_imports_in_a_venv(self):
        # A copy of the package, so the build leaves nothing in the tree.
        source = os.path.join(self.dir, "src")
        shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__", "tests"))
        venv = os.path.join(self.dir, "venv")
        subprocess.run([sys.executable, "-m", "venv",
                        "--system-site-packages", venv], check=True)
        pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "-q",
               "--disable-pip-version-check"]
        env = dict(os.environ, CFDB_WORKER_PROTO_DIR=os.environ.get(
            "CFDB_WORKER_PROTO_DIR", os.path.join(PACKAGE, "..", "..",
                                                  "proto")))
        env.pop("PYTHONPATH", None)
        wheels = os.path.join(self.dir, "wheels")
        subprocess.run(pip + ["wheel", "--no-build-isolation", "--no-index",
                              "--no-deps", "-w", wheels, source],
                       check=True, env=env, cwd=self.dir)
        [wheel] = os.listdir(wheels)
        names = set(zipfile.ZipFile(os.path.join(wheels, wheel)).namelist())
        for name in ("py.typed", "aio.py", "connection.py",
                     "_wire/worker_pb2.py", "_wire/worker_pb2_grpc.py"):
            self.assertIn(f"cfdb_worker/{name}", names)
        subprocess.run(pip + ["install", "--no-index",
                              os.path.join(wheels, wheel)],
                       check=True, env=env, cwd=self.dir)
        imported = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-c",
             "import cfdb_worker, cfdb_worker.aio; "
             "print(cfdb_worker.__file__)"],
            check=True, env=env, cwd=self.dir, capture_output=True,
            text=True)
        self.assertTrue(imported.stdout.startswith(venv), imported.stdout)

    def test_the_build_refuses_a_runtime_older_than_protoc(self):
        generate.check_versions(shutil.which("protoc"))  # Debian's: agree
        newer = os.path.join(self.dir, "protoc")
        with open(newer, "w") as f:
            f.write("#!/bin/sh\necho libprotoc 99.0\n")
        os.chmod(newer, 0o755)
        with self.assertRaises(RuntimeError) as raised:
            generate.check_versions(newer)
        self.assertIn("99.0", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
