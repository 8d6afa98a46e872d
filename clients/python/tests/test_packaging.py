"""The package as a user installs it: a wheel built offline with Debian's
tools holds the sources, py.typed and the generated modules, installs into
a venv that sees Debian's grpcio, and imports there; its build refuses a
protobuf runtime older than the protoc that generates the modules. And the
limits and schedules it repeats from the C++ side are the C++ side's."""
import ast
import os
import re
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

COMMON_PY = os.path.join(PACKAGE, "cfdb_worker", "_common.py")
LIMITS_H = os.path.join(PACKAGE, "..", "..", "include", "cfdb", "worker",
                        "limits.h")
# What the package repeats from limits.h: C++ name -> Python name.
REPEATED = {
    "kMaxMessageBytes": "MAX_MESSAGE_BYTES",
    "kStdinChunkBytes": "STDIN_CHUNK_BYTES",
    "kRetryInitialDelay": "RETRY_INITIAL_DELAY_SECONDS",
    "kRetryMaxDelay": "RETRY_MAX_DELAY_SECONDS",
    "kReattachMinWindow": "REATTACH_MIN_WINDOW_SECONDS",
    "kReattachUnlimitedWindow": "REATTACH_UNLIMITED_WINDOW_SECONDS",
    "kClientKeepaliveTime": "KEEPALIVE_TIME_SECONDS",
    "kClientKeepaliveTimeout": "KEEPALIVE_TIMEOUT_SECONDS",
}
_CHRONO_SECONDS = {"std::chrono::milliseconds": 0.001,
                   "std::chrono::seconds": 1, "std::chrono::minutes": 60}


def cxx_limits(text):
    """limits.h's constants by name: byte counts as ints, durations in
    seconds. Knows the forms the file uses: `int kX = 64 << 20;`,
    `std::size_t kX = std::size_t{256} << 10;`, `std::chrono::seconds
    kX{10};`."""
    found = {}
    for type_, name, value in re.findall(
            r"inline constexpr ([\w:]+) (k\w+)\s*(=[^;]*|\{[^}]*\});", text):
        if value.startswith("{"):
            found[name] = int(value.strip("{}")) * _CHRONO_SECONDS[type_]
        else:
            expr = re.sub(r"std::size_t\{(\d+)\}", r"\1", value[1:])
            if not re.fullmatch(r"[\d\s<()]+", expr):
                raise ValueError(f"{name}: cannot read {value!r}")
            found[name] = eval(expr)  # digits, spaces, << and () only
    return found


def python_constants(text):
    """The module-level constants of a Python source, by name (numbers and
    arithmetic on them only), read without importing it."""
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = eval(compile(
                    ast.Expression(node.value), "<constant>", "eval"),
                    {"__builtins__": {}})
            except Exception:  # not a plain constant: not ours to compare
                pass
    return found


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
        with open(os.path.join(env["CFDB_WORKER_PROTO_DIR"], "..",
                               "VERSION"), encoding="utf-8") as version:
            self.assertTrue(wheel.startswith(
                f"cfdb_worker-{version.read().strip()}-"), wheel)
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



class RepeatedLimitsTest(unittest.TestCase):
    def test_the_package_repeats_limits_h_as_it_is(self):
        with open(LIMITS_H) as f:
            limits = cxx_limits(f.read())
        with open(COMMON_PY) as f:
            repeated = python_constants(f.read())
        self.assertGreaterEqual(len(limits), 9, "limits.h read whole")
        for cxx, py in REPEATED.items():
            with self.subTest(cxx=cxx):
                self.assertIn(cxx, limits)
                self.assertIn(py, repeated)
                self.assertEqual(repeated[py], limits[cxx], py)

    def test_the_reader_reads_each_form_and_refuses_others(self):
        self.assertEqual(cxx_limits(
            "inline constexpr int kA = 64 << 20;\n"
            "inline constexpr std::size_t kB = std::size_t{256} << 10;\n"
            "inline constexpr std::chrono::milliseconds kC{500};\n"),
            {"kA": 64 << 20, "kB": 256 << 10, "kC": 0.5})
        with self.assertRaises(ValueError):
            cxx_limits("inline constexpr int kA = kB * 2;")


if __name__ == "__main__":
    unittest.main()
