"""Builds the cfdb_worker package: its sources and the gRPC modules
generated from the worker's proto with Debian's protoc (protobuf-compiler,
the version of python3-protobuf) and its gRPC plugin
(protobuf-compiler-grpc); python3-grpc-tools' bundled protoc is too old for
the proto's `optional` fields.

    python3 clients/python/generate.py build/python   # then PYTHONPATH=build/python

setup.py calls generate() on its build directory, so `pip install
./clients/python` (and a wheel) gets the same modules. Nothing generated is
committed. The build refuses a protobuf runtime older than the protoc that
generates the modules (protobuf's rule: generated code runs on a runtime at
least as new as its generator).
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.environ.get("CFDB_WORKER_PROTO_DIR",
                            os.path.join(HERE, "..", "..", "proto"))
# The wire contract, copied under the package's private _wire package so the
# generated modules import as cfdb_worker._wire.* and name no top-level
# package of their own.
PROTOS = {"worker.proto": "cfdb/worker/v1/worker.proto"}


def release(version, runtime):
    """Protobuf's release number of a version: protoc 3.21.12 and the
    Python runtime 4.21.12 are both release 21; protoc 22.0 and the runtime
    5.26.1 are 22 and 26."""
    parts = [int(p) for p in version.split(".")[:2]]
    return parts[1] if runtime or parts[0] == 3 else parts[0]


def check_versions(protoc):
    """RuntimeError unless the protobuf runtime this Python imports is at
    least as new as `protoc`."""
    out = subprocess.run([protoc, "--version"], capture_output=True,
                         text=True, check=True).stdout.split()[-1]
    try:
        import google.protobuf
    except ImportError:
        raise RuntimeError("the protobuf runtime is needed: apt-get install "
                           "python3-protobuf (or python3-grpcio)") from None
    runtime = google.protobuf.__version__
    if release(runtime, True) < release(out, False):
        raise RuntimeError(
            f"protoc {out} generates modules the protobuf runtime {runtime} "
            "cannot load: use the runtime of protoc's release or later "
            "(Debian ships them together)")


def generate(out_dir):
    """Writes OUT_DIR/cfdb_worker/_wire/{worker_pb2,worker_pb2_grpc}.py."""
    wire = os.path.join(out_dir, "cfdb_worker", "_wire")
    os.makedirs(wire, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        staged = os.path.join(tmp, "cfdb_worker", "_wire")
        os.makedirs(staged)
        for name, source in PROTOS.items():
            shutil.copyfile(os.path.join(PROTO_ROOT, source),
                            os.path.join(staged, name))
        protoc = shutil.which("protoc")
        plugin = shutil.which("grpc_python_plugin")
        if protoc is None or plugin is None:
            raise RuntimeError(
                "protoc and grpc_python_plugin are needed: apt-get install "
                "protobuf-compiler protobuf-compiler-grpc")
        check_versions(protoc)
        args = [protoc, f"-I{tmp}", f"--python_out={out_dir}",
                f"--grpc_python_out={out_dir}",
                f"--plugin=protoc-gen-grpc_python={plugin}"]
        args += [f"cfdb_worker/_wire/{name}" for name in PROTOS]
        if subprocess.run(args, check=False).returncode != 0:
            raise RuntimeError(f"protoc failed: {' '.join(args)}")
    with open(os.path.join(wire, "__init__.py"), "w") as f:
        f.write('"""Generated from proto/ at build time; private."""\n')


def build(out_dir):
    """Copies the package's sources to OUT_DIR and generates its modules."""
    package = os.path.join(out_dir, "cfdb_worker")
    os.makedirs(package, exist_ok=True)
    source = os.path.join(HERE, "cfdb_worker")
    for name in sorted(os.listdir(source)):
        if name.endswith(".py") or name == "py.typed":
            shutil.copyfile(os.path.join(source, name),
                            os.path.join(package, name))
    generate(out_dir)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: generate.py OUT_DIR")
    build(sys.argv[1])
