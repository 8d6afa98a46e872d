"""--wool-compat: a pool manager written against the Python worker library
Wool polls and retires a cfdb-worker with Wool's own names, stubs generated
here from proto/wool/runtime/protobuf/wire/worker.proto: the service
wool.runtime.protobuf.wire.Worker, `idle(Void) -> IdleTime{seconds}` and
`stop(StopRequest{timeout}) -> Void`, timeout being the drain grace."""
import atexit
import concurrent.futures
import importlib
import os
import shutil
import sys
import tempfile
import time
import unittest

import grpc
from grpc_tools import protoc

from cfdb_worker import WorkerConnection
from support import Worker, wait_for

PROTO_ROOT = os.environ.get(
    "CFDB_WORKER_PROTO_DIR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                 "proto"))


def wool_modules():
    """Generates and imports wool.runtime.protobuf.wire.worker_pb2{,_grpc}."""
    out = tempfile.mkdtemp(prefix="cfdb-wool-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    rc = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"--python_out={out}",
                      f"--grpc_python_out={out}",
                      "wool/runtime/protobuf/wire/worker.proto"])
    assert rc == 0, "grpc_tools.protoc failed"
    for directory in ("wool", "wool/runtime", "wool/runtime/protobuf",
                      "wool/runtime/protobuf/wire"):
        open(os.path.join(out, directory, "__init__.py"), "a").close()
    sys.path.insert(0, out)
    return (importlib.import_module("wool.runtime.protobuf.wire.worker_pb2"),
            importlib.import_module(
                "wool.runtime.protobuf.wire.worker_pb2_grpc"))


pb2, pb2_grpc = wool_modules()


class WoolCompatTest(unittest.TestCase):
    def setUp(self):
        self.worker = Worker("--wool-compat")
        self.addCleanup(self.worker.kill)
        self.channel = grpc.insecure_channel(self.worker.address)
        self.addCleanup(self.channel.close)
        self.wool = pb2_grpc.WorkerStub(self.channel)

    def test_the_service_and_method_names_are_wools(self):
        self.assertEqual(pb2.DESCRIPTOR.services_by_name["Worker"].full_name,
                         "wool.runtime.protobuf.wire.Worker")
        self.assertEqual(pb2.IdleTime.DESCRIPTOR.fields_by_name["seconds"]
                         .number, 1)
        self.assertEqual(pb2.StopRequest.DESCRIPTOR.fields_by_name["timeout"]
                         .number, 1)

    def test_idle_is_the_same_reading_as_cfdb_idle(self):
        first = self.wool.idle(pb2.Void(), timeout=5).seconds
        with WorkerConnection(self.worker.address) as c:
            self.assertTrue(wait_for(lambda: c.idle() - first >= 0.15))
            ours = c.idle()
        self.assertGreaterEqual(self.wool.idle(pb2.Void(), timeout=5).seconds,
                                ours)

    def test_a_pool_manager_polls_then_retires_with_a_drain(self):
        with WorkerConnection(self.worker.address) as c, \
                concurrent.futures.ThreadPoolExecutor() as pool:
            job = pool.submit(c.dispatch, ["sleep", "3"])
            self.assertTrue(wait_for(
                lambda: self.wool.idle(pb2.Void(), timeout=5).seconds == 0.0),
                "0 while busy")
            reply = self.wool.stop(pb2.StopRequest(timeout=30.0), timeout=60)
            self.assertIsInstance(reply, pb2.Void)
            self.assertTrue(job.result().ok, "drained within the grace")
        self.assertEqual(self.worker.wait(), 0)
        self.assertIn("stop rpc: draining with grace 30 s", self.worker.log)

    def test_timeout_zero_cancels_at_once(self):
        with WorkerConnection(self.worker.address) as c, \
                concurrent.futures.ThreadPoolExecutor() as pool:
            job = pool.submit(c.dispatch, ["sleep", "30"])
            self.assertTrue(wait_for(lambda: c.idle() == 0.0))
            started = time.monotonic()
            self.wool.stop(pb2.StopRequest(timeout=0.0), timeout=60)
            self.assertEqual(job.result().failure.reason, "CANCELLED")
        self.assertLess(time.monotonic() - started, 20)

    def test_wools_dispatch_is_unimplemented_with_one_line(self):
        # Not in our stubs (we serve idle and stop only): called by name, as
        # Wool's own client calls it.
        dispatch = self.channel.unary_stream(
            "/wool.runtime.protobuf.wire.Worker/dispatch",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as raised:
            list(dispatch(b"", timeout=5))
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.UNIMPLEMENTED)
        self.assertEqual(raised.exception.details(),
                         "cfdb-worker serves only Wool's idle and stop, not "
                         "/wool.runtime.protobuf.wire.Worker/dispatch")

    def test_wools_other_methods_are_unimplemented_without_the_flag(self):
        plain = Worker()
        self.addCleanup(plain.kill)
        with grpc.insecure_channel(plain.address) as channel:
            with self.assertRaises(grpc.RpcError) as raised:
                pb2_grpc.WorkerStub(channel).idle(pb2.Void(), timeout=5)
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.UNIMPLEMENTED)


if __name__ == "__main__":
    unittest.main()
