"""Builds the cfdb_worker package: its sources and the gRPC modules
generated from the worker's proto with grpc_tools (Debian's
python3-grpc-tools).

    python3 clients/python/generate.py build/python   # then PYTHONPATH=build/python

setup.py calls generate() on its build directory, so `pip install
./clients/python` gets the same modules. Nothing generated is committed.
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.environ.get("CFDB_WORKER_PROTO_DIR",
                            os.path.join(HERE, "..", "..", "proto"))
# The wire contract, copied under the package's private _wire package so the
# generated modules import as cfdb_worker._wire.* and name no top-level
# package of their own.
PROTOS = {"worker.proto": "cfdb/worker/v1/worker.proto"}


def generate(out_dir):
    """Writes OUT_DIR/cfdb_worker/_wire/{worker_pb2,worker_pb2_grpc}.py."""
    from grpc_tools import protoc
    wire = os.path.join(out_dir, "cfdb_worker", "_wire")
    os.makedirs(wire, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        staged = os.path.join(tmp, "cfdb_worker", "_wire")
        os.makedirs(staged)
        for name, source in PROTOS.items():
            shutil.copyfile(os.path.join(PROTO_ROOT, source),
                            os.path.join(staged, name))
        args = ["protoc", f"-I{tmp}", f"--python_out={out_dir}",
                f"--grpc_python_out={out_dir}"]
        args += [f"cfdb_worker/_wire/{name}" for name in PROTOS]
        if protoc.main(args) != 0:
            raise RuntimeError(f"grpc_tools.protoc failed: {' '.join(args)}")
    with open(os.path.join(wire, "__init__.py"), "w") as f:
        f.write('"""Generated from proto/ at build time; private."""\n')


def build(out_dir):
    """Copies the package's sources to OUT_DIR and generates its modules."""
    package = os.path.join(out_dir, "cfdb_worker")
    os.makedirs(package, exist_ok=True)
    source = os.path.join(HERE, "cfdb_worker")
    for name in sorted(os.listdir(source)):
        if name.endswith(".py"):
            shutil.copyfile(os.path.join(source, name),
                            os.path.join(package, name))
    generate(out_dir)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: generate.py OUT_DIR")
    build(sys.argv[1])
