"""The Python classifier against the one case table the C++ classifier is
checked against (tests/data/error_cases.json), and what a worker may send
that this client does not know, from stub servers: an unknown failure
reason, an exit with neither code nor signal, the request's payload, and
stdin sent whole to a worker without DispatchStream."""
import concurrent.futures
import io
import json
import os
import re
import unittest

import grpc

import cfdb_worker
from cfdb_worker import WorkerConnection, _rpcs, errors
from cfdb_worker._wire import worker_pb2, worker_pb2_grpc
from support import AsyncClient, BlockingClient, Failed

CASES = os.environ.get("CFDB_ERROR_CASES", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
    "data", "error_cases.json"))
# The C++ classifier, whose evidence word lists errors.py repeats:
# errors.cc's function -> errors.py's tuple.
ERRORS_CC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                         "..", "..", "src", "rpc", "errors.cc")
EVIDENCE_WORDS = {"HasTlsEvidence": "_TLS_WORDS",
                  "HasSizeLimitEvidence": "_SIZE_WORDS",
                  "HasTransportEvidence": "_TRANSPORT_WORDS"}
# The table's method names, as classify() takes them: the registry's
# (cfdb_worker/_rpcs.py, generated from include/cfdb/worker/rpcs.h).
RPCS = {row.name: key for key, row in _rpcs.RPCS.items()}


class EvidenceWordsTest(unittest.TestCase):
    def test_the_word_lists_are_the_cxx_classifiers_own(self):
        with open(ERRORS_CC, encoding="utf-8") as f:
            text = f.read()
        for function, name in EVIDENCE_WORDS.items():
            body = re.search(r"bool %s\(.*?\n\}" % function, text, re.S)
            self.assertIsNotNone(body, f"{function} in errors.cc")
            self.assertEqual(getattr(errors, name),
                             tuple(re.findall(r'"([^"]*)"', body.group(0))),
                             f"errors.{name} against errors.cc's {function}")


def error_kinds():
    """Every WorkerError class, by its kind's name."""
    kinds, todo = {}, [cfdb_worker.WorkerError]
    while todo:
        cls = todo.pop()
        kinds.setdefault(cls.kind, cls)
        todo += cls.__subclasses__()
    return kinds


class CaseTableTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(CASES) as f:
            cls.cases = json.load(f)["cases"]

    def test_every_case_classifies_as_the_table_says(self):
        self.assertGreater(len(self.cases), 30)
        for case in self.cases:
            with self.subTest(**{k: case[k] for k in
                                 ("rpc", "code", "message", "accepted")}):
                error = errors.classify(
                    RPCS[case["rpc"]],
                    Failed(grpc.StatusCode[case["code"]], case["message"]),
                    case["accepted"])
                self.assertIsInstance(error, cfdb_worker.WorkerError)
                self.assertEqual(error.kind, case["kind"])
                self.assertEqual(error.exit_code, case["exit_code"])
                self.assertEqual(error.code.name, case["code"])
                self.assertEqual(
                    errors.may_have_been_accepted(error, RPCS[case["rpc"]]),
                    case.get("may_have_been_accepted", False))

    def test_every_code_of_every_method_as_the_table_says(self):
        with open(CASES) as f:
            table = json.load(f)
        self.assertEqual(len(table["by_code"]), 16)
        for row in table["by_code"]:
            for rpc, name in RPCS.items():
                want = row["kind"]
                for flag in table["by_flag"]:
                    if (flag["code"] == row["code"] and
                            getattr(_rpcs.RPCS[name], flag["flag"])):
                        want = flag["kind"]
                with self.subTest(code=row["code"], rpc=rpc):
                    error = errors.classify(
                        name, Failed(grpc.StatusCode[row["code"]], "x"),
                        False)
                    self.assertEqual(error.kind, want)

    def test_the_registry_has_every_method_the_worker_serves(self):
        served = {m.name for m in
                  worker_pb2.DESCRIPTOR.services_by_name["Worker"].methods}
        listed = {m for row in _rpcs.RPCS.values() for m in row.methods}
        self.assertLessEqual(served, listed)
        self.assertLessEqual({case["rpc"] for case in self.cases},
                             set(RPCS))

    def test_the_table_and_the_classes_have_the_same_kinds(self):
        with open(CASES) as f:
            kinds = json.load(f)["kinds"]
        self.assertEqual({k: cls.exit_code for k, cls in
                          error_kinds().items()},
                         {row["kind"]: row["exit_code"] for row in kinds})
        self.assertEqual(set(error_kinds()),
                         {case["kind"] for case in self.cases})
        exported = {getattr(cfdb_worker, name) for name in cfdb_worker.__all__}
        self.assertLessEqual(set(error_kinds().values()), exported)


class StubWorker(worker_pb2_grpc.WorkerServicer):
    """A worker that answers every Dispatch with `events`, and remembers
    the requests."""

    def __init__(self, events):
        self.events = events
        self.requests = []
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(2))
        worker_pb2_grpc.add_WorkerServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Dispatch(self, request, context):
        self.requests.append(request)
        yield from self.events

    def close(self):
        self.server.stop(0)


ACCEPTED = worker_pb2.DispatchEvent(accepted=worker_pb2.Accepted())


class StubServerTest(unittest.TestCase):
    def stub(self, *events):
        stub = StubWorker(list(events))
        self.addCleanup(stub.close)
        return stub

    def test_an_unknown_failure_reason_is_the_jobs_end_not_a_value_error(self):
        failure = worker_pb2.Failure(message="a newer worker's reason")
        failure.reason = 99
        stub = self.stub(ACCEPTED, worker_pb2.DispatchEvent(failure=failure))
        with WorkerConnection(f"127.0.0.1:{stub.port}") as c:
            result = c.dispatch(["true"])
        self.assertEqual(result.failure, cfdb_worker.Failure(
            "UNKNOWN_REASON_99", "a newer worker's reason"))
        self.assertFalse(result.ok)

    def test_an_exit_without_code_or_signal_is_a_protocol_error(self):
        stub = self.stub(ACCEPTED,
                         worker_pb2.DispatchEvent(exit=worker_pb2.Exit()))
        with WorkerConnection(f"127.0.0.1:{stub.port}") as c:
            with self.assertRaises(cfdb_worker.OutcomeUnknown) as raised:
                c.dispatch(["true"], detach_grace=30)
        self.assertIn("protocol error", str(raised.exception))
        self.assertIsNone(raised.exception.code)
        self.assertEqual(len(stub.requests), 1,
                         "no attach: asking again would not help")

    def test_the_request_carries_payload_cwd_and_the_handle_fields(self):
        stub = self.stub(ACCEPTED, worker_pb2.DispatchEvent(
            exit=worker_pb2.Exit(code=0)))
        with WorkerConnection(f"127.0.0.1:{stub.port}") as c:
            c.dispatch(["x"], payload=b"\0\1opaque", cwd="/tmp",
                       detach_grace=-1, attach_if_exists=True,
                       drop_oldest=True, kind="embedded")
            c.dispatch(["x"])
        sent, default = stub.requests
        self.assertEqual(sent.payload, b"\0\1opaque")
        self.assertEqual(sent.exec.cwd, "/tmp")
        self.assertEqual(sent.kind, "embedded")
        self.assertEqual(sent.detach_grace_seconds, -1)
        self.assertTrue(sent.attach_if_exists)
        self.assertEqual(sent.output_overflow,
                         worker_pb2.DispatchRequest.OUTPUT_OVERFLOW_DROP_OLDEST)
        self.assertTrue(default.job_id.startswith("py-"))
        self.assertEqual(default.detach_grace_seconds, 0)
        self.assertFalse(default.attach_if_exists)

    def test_a_worker_without_dispatch_stream_gets_stdin_whole(self):
        for client in (BlockingClient(), AsyncClient()):
            stub = self.stub(ACCEPTED, worker_pb2.DispatchEvent(
                exit=worker_pb2.Exit(code=0)))
            data = bytes(range(256)) * 8192  # 2 MiB: streamed if it can be
            with self.subTest(client=client.client_kind()), \
                    client.open(f"127.0.0.1:{stub.port}") as c:
                self.assertTrue(c.dispatch(["cat"], stdin=io.BytesIO(data)).ok)
                self.assertTrue(c.dispatch(["cat"], stdin=data).ok)
            self.assertEqual([r.exec.stdin for r in stub.requests],
                             [data, data])


if __name__ == "__main__":
    unittest.main()
