"""The operations of cfdb_worker._core as steps, without a server or a
driver: a scripted worker answers each step, so the reattach schedule, the
stdin flow control and the fallback to Dispatch are checked step by step,
and nothing sleeps."""
import unittest

import grpc

import cfdb_worker
from cfdb_worker import _core
from cfdb_worker._steps import Input, Next, ReadAll, Run, Sleep, Stream, Unary
from cfdb_worker._wire import worker_pb2
from support import Failed


def event(**kwargs):
    return worker_pb2.DispatchEvent(**kwargs)


ACCEPTED = event(accepted=worker_pb2.Accepted())
EXIT_0 = event(exit=worker_pb2.Exit(code=0))
LOST = Failed(grpc.StatusCode.UNAVAILABLE, "Socket closed")


def stdout(data, offset=0):
    return event(output=worker_pb2.Output(
        stream=worker_pb2.Output.STDOUT, data=data, offset=offset))


class ScriptedWorker:
    """Answers an operation's steps from a script: the replies of its unary
    calls, and the messages of each stream it opens, in order (an exception
    in either fails it). `steps`: every step done."""

    def __init__(self, *streams, replies=()):
        self._streams = list(streams)
        self._replies = list(replies)
        self.steps = []

    def run(self, steps):
        run = Run(steps)
        while run.step is not None:
            self.steps.append(run.step)
            try:
                reply = self._answer(run.step)
            except grpc.RpcError as e:
                run.fail(e)
            else:
                run.reply(reply)
        return run.result

    def of(self, kind):
        return [step for step in self.steps if isinstance(step, kind)]

    def _answer(self, step):
        if isinstance(step, Stream):
            return iter(self._streams.pop(0))
        if isinstance(step, (Unary, Next)):
            answer = (self._replies.pop(0) if isinstance(step, Unary)
                      else next(step.stream, None))
            if isinstance(answer, BaseException):
                raise answer
            return answer
        if isinstance(step, ReadAll):
            return b"".join(step.source)
        return None  # Input, Sleep, Emit: nothing comes back


class UnaryTest(unittest.TestCase):
    def test_idle_is_one_call_and_returns_its_seconds(self):
        worker = ScriptedWorker(replies=[worker_pb2.IdleTime(seconds=3)])
        self.assertEqual(worker.run(_core.idle(timeout=2)), 3.0)
        self.assertEqual(worker.steps, [
            Unary("Idle", worker_pb2.IdleRequest(), 2.0)])

    def test_a_failed_call_raises_its_kind(self):
        worker = ScriptedWorker(replies=[
            Failed(grpc.StatusCode.UNIMPLEMENTED, "no Idle")])
        with self.assertRaises(cfdb_worker.IdleUnavailable):
            worker.run(_core.idle())

    def test_a_bad_timeout_raises_before_any_step(self):
        worker = ScriptedWorker()
        with self.assertRaises(ValueError):
            worker.run(_core.health(timeout=0))
        self.assertEqual(worker.steps, [])


class DispatchTest(unittest.TestCase):
    def test_a_lost_stream_is_attached_to_again_from_its_offsets(self):
        attached = event(attached=worker_pb2.Attached(stdout_offset=3))
        worker = ScriptedWorker([ACCEPTED, stdout(b"abc"), LOST],
                                [attached, stdout(b"de", 3), EXIT_0])
        result = worker.run(_core.dispatch(["x"], job_id="j",
                                           detach_grace=30))
        self.assertEqual((result.exit_code, result.stdout), (0, b"abcde"))
        self.assertEqual(worker.of(Sleep), [Sleep(0.5)])
        dispatched, attach = worker.of(Stream)
        self.assertEqual(dispatched.method, "Dispatch")
        self.assertEqual((attach.method, attach.request.job_id,
                          attach.request.stdout_offset), ("Attach", "j", 3))

    def test_without_reattach_a_lost_stream_is_outcome_unknown(self):
        worker = ScriptedWorker([ACCEPTED, LOST])
        with self.assertRaises(cfdb_worker.OutcomeUnknown):
            worker.run(_core.dispatch(["x"], reattach=False))
        self.assertEqual(worker.of(Sleep), [])

    def test_stdin_is_read_from_acceptance_until_the_job_closes_it(self):
        closed = event(input_closed=worker_pb2.InputClosed())
        worker = ScriptedWorker([ACCEPTED, closed, EXIT_0])
        worker.run(_core.dispatch(["head", "-c1"], stdin=iter([b"xy"])))
        [stream] = worker.of(Stream)
        self.assertEqual(stream.method, "DispatchStream")
        self.assertEqual([step.go for step in worker.of(Input)],
                         [True, False])

    def test_a_worker_without_dispatch_stream_gets_stdin_whole(self):
        worker = ScriptedWorker(
            [Failed(grpc.StatusCode.UNIMPLEMENTED, "DispatchStream")],
            [ACCEPTED, EXIT_0])
        worker.run(_core.dispatch(["cat"], stdin=iter([b"x", b"y"])))
        streamed, whole = worker.of(Stream)
        self.assertEqual((streamed.method, whole.method),
                         ("DispatchStream", "Dispatch"))
        self.assertEqual(whole.request.exec.stdin, b"xy")
        kinds = [type(step) for step in worker.steps]
        self.assertLess(kinds.index(ReadAll), kinds.index(Input),
                        "the source is read whole before any job took it")


if __name__ == "__main__":
    unittest.main()
