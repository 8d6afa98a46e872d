"""cfdb_worker against real workers: plaintext, mutual TLS and the Unix
socket, and every error kind a caller must tell apart."""
import concurrent.futures
import math
import unittest

import grpc

import cfdb_worker
from support import (AsyncClient, BlockingClient, Worker, test_cases,
                     wait_for)


class ContractTests:
    """The idle/stop/dispatch/health contract over one transport (a
    fixture of support.py)."""

    def connect(self, pem=None, identity=None):
        return self.open(self.address(), self.credentials(pem, identity))

    def test_idle_accrues_from_startup_and_is_zero_while_busy(self):
        with self.connect() as c:
            first = c.idle()
            self.assertTrue(wait_for(lambda: c.idle() - first >= 0.15),
                            "idle accrues")
            with concurrent.futures.ThreadPoolExecutor() as pool:
                job = pool.submit(c.dispatch, ["sleep", "3"])
                self.assertTrue(wait_for(lambda: c.idle() == 0.0))
                self.assertTrue(job.result().ok)
            # The job's end arrives a moment before it leaves the docket.
            self.assertTrue(wait_for(lambda: c.idle() > 0.0))

    def test_dispatch_returns_output_byte_exact_and_the_exit_code(self):
        data = bytes(range(256)) * 1000
        with self.connect() as c:
            result = c.dispatch(["/bin/sh", "-c", "cat; echo oops >&2; exit 3"],
                                stdin=data, env={"A": "1"})
        self.assertEqual(result.exit_code, 3)
        self.assertEqual(result.stdout, data)
        self.assertEqual(result.stderr, b"oops\n")

    def test_events_come_in_order_and_end_once(self):
        with self.connect() as c:
            events = list(c.events(["/bin/sh", "-c", "echo $GREETING"],
                                   env={"GREETING": "hi"}))
        self.assertIsInstance(events[0], cfdb_worker.Accepted)
        self.assertEqual(events[1], cfdb_worker.Output("stdout", b"hi\n"))
        self.assertEqual(events[-1], cfdb_worker.Exit(code=0))

    def test_a_time_limit_and_a_signal_say_how_the_job_ended(self):
        with self.connect() as c:
            limited = c.dispatch(["sleep", "30"], time_limit=0.3)
            killed = c.dispatch(["/bin/sh", "-c", "kill -9 $$"])
        self.assertEqual(limited.failure.reason, "TIME_LIMIT_EXCEEDED")
        self.assertIsNone(limited.exit_code)
        self.assertEqual(killed.signal, 9)

    def test_stop_drains_the_job_in_flight_and_health_turns(self):
        with self.connect() as c:
            self.assertTrue(c.health())
            with concurrent.futures.ThreadPoolExecutor() as pool:
                job = pool.submit(c.dispatch, ["sleep", "3"])
                self.assertTrue(wait_for(lambda: c.idle() == 0.0))
                summary = c.stop(grace=30)
                self.assertTrue(job.result().ok, "drained, not cancelled")
        self.assertEqual(summary, cfdb_worker.StopSummary(drained=1,
                                                          cancelled=0))
        self.assertEqual(self.worker.wait(), 0)

    def test_a_stopped_worker_is_a_transient_error(self):
        with self.connect() as c:
            c.stop(grace=0)
            self.worker.wait()
            with self.assertRaises(cfdb_worker.TransientRpcError):
                c.idle(timeout=2)


class MutualTlsTests(ContractTests):
    """The contract over mutual TLS, and what only TLS adds."""

    def test_an_unlisted_identity_is_permission_denied(self):
        with self.connect(self.stranger_pem) as c:
            with self.assertRaises(cfdb_worker.PermissionDenied) as raised:
                c.idle()
        self.assertEqual(raised.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(raised.exception.exit_code, 77)

    def test_an_observer_may_poll_but_not_stop(self):
        with self.connect(self.worker_pem) as c:
            self.assertGreater(c.idle(), 0.0)
            with self.assertRaises(cfdb_worker.PermissionDenied):
                c.stop(grace=0)
        self.assertIsNone(self.worker.process.poll(), "still running")

    def test_the_wrong_identity_is_a_handshake_error(self):
        with self.connect(identity="someone.else.internal") as c:
            with self.assertRaises(cfdb_worker.HandshakeError) as raised:
                c.idle(timeout=5)
        self.assertIsInstance(raised.exception, cfdb_worker.TransientRpcError)


class LegacyServer:
    """A gRPC server without the worker's service: Idle is UNIMPLEMENTED
    there, as on a worker that predates it."""

    def __init__(self):
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(1))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def close(self):
        self.server.stop(0)


class ErrorKindTests:
    def test_a_worker_without_idle_is_idle_unavailable(self):
        legacy = LegacyServer()
        self.addCleanup(legacy.close)
        with self.open(f"127.0.0.1:{legacy.port}") as c:
            with self.assertRaises(cfdb_worker.IdleUnavailable) as raised:
                c.idle()
        self.assertNotIsInstance(raised.exception, cfdb_worker.TransientRpcError)
        self.assertEqual(raised.exception.exit_code, 69)

    def test_nobody_listening_is_transient(self):
        with self.open("127.0.0.1:1") as c:
            with self.assertRaises(cfdb_worker.TransientRpcError):
                c.idle(timeout=2)

    def test_bad_timeouts_and_graces_make_no_call(self):
        with self.open("127.0.0.1:1") as c:
            for timeout in (0, -1, math.inf, math.nan):
                with self.assertRaises(ValueError):
                    c.idle(timeout=timeout)
            with self.assertRaises(ValueError):
                c.stop(grace=math.nan)
        with self.assertRaises(ValueError):
            self.open("")

    def test_a_closed_connection_makes_no_call(self):
        c = self.open("127.0.0.1:1")
        c.close()
        with self.assertRaises(ValueError):
            c.idle()
        with self.assertRaises(ValueError):
            list(c.events(["true"]))

    def test_a_full_docket_is_transient_and_an_invalid_job_is_not(self):
        worker = Worker("--max-concurrent-tasks", "1")
        self.addCleanup(worker.kill)
        with self.open(worker.address) as c:
            with concurrent.futures.ThreadPoolExecutor() as pool:
                busy = pool.submit(c.dispatch, ["sleep", "3"])
                self.assertTrue(wait_for(lambda: c.idle() == 0.0))
                with self.assertRaises(cfdb_worker.TransientRpcError):
                    c.dispatch(["true"])
                busy.result()
            with self.assertRaises(cfdb_worker.RpcError) as raised:
                c.dispatch([])
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_a_job_cut_off_after_acceptance_is_outcome_unknown(self):
        worker = Worker()
        self.addCleanup(worker.kill)
        with self.open(worker.address) as c:
            events = c.events(["sleep", "30"])
            self.assertIsInstance(next(events), cfdb_worker.Accepted)
            worker.kill()
            with self.assertRaises(cfdb_worker.OutcomeUnknown):
                list(events)


test_cases(globals(), ContractTests, mutual_tls=MutualTlsTests)


class ErrorKindTest(BlockingClient, ErrorKindTests, unittest.TestCase):
    pass


class AioErrorKindTest(AsyncClient, ErrorKindTests, unittest.TestCase):
    pass


if __name__ == "__main__":
    unittest.main()
