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


def stdout(data, offset=0, lost=0):
    return event(output=worker_pb2.Output(
        stream=worker_pb2.Output.STDOUT, data=data, offset=offset,
        lost_bytes=lost))


def page(*ids, token="", others=(0, 0)):
    return worker_pb2.ListJobsReply(
        jobs=[worker_pb2.JobInfo(job_id=job_id, readers=2) for job_id in ids],
        next_page_token=token, others_running=others[0],
        others_ended=others[1])


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


class JobsTest(unittest.TestCase):
    def test_jobs_reads_every_page_by_its_token(self):
        worker = ScriptedWorker(replies=[page("a", "b", token="t1"),
                                         page("c", others=(4, 5))])
        listed = worker.run(_core.jobs(timeout=2))
        self.assertEqual([(j.job_id, j.readers) for j in listed],
                         [("a", 2), ("b", 2), ("c", 2)])
        self.assertEqual([(u.request.page_size, u.request.page_token)
                          for u in worker.of(Unary)], [(0, ""), (0, "t1")])

    def test_a_page_and_the_others_counted(self):
        worker = ScriptedWorker(replies=[page("a", token="t", others=(1, 2))])
        got = worker.run(_core.jobs_page(page_size=1, page_token="s"))
        self.assertEqual(([j.job_id for j in got.jobs], got.next_page_token,
                          got.others_running, got.others_ended),
                         (["a"], "t", 1, 2))
        [call] = worker.of(Unary)
        self.assertEqual((call.method, call.request.page_size,
                          call.request.page_token), ("ListJobs", 1, "s"))

    def test_status_reads_every_field(self):
        reply = worker_pb2.StatusReply(
            version="1.2.3", uptime_seconds=5, idle_seconds=0,
            jobs_in_flight=2, max_concurrent_jobs=4, job_ids=["a"],
            other_jobs_in_flight=1, jobs_retained=3, draining=False,
            retires_at_unix_seconds=1.8e9, retirement_rule="max_lifetime",
            scale_in_protected=True, identity="w.example")
        worker = ScriptedWorker(replies=[reply])
        got = worker.run(_core.status(timeout=2))
        self.assertEqual((got.job_ids, got.other_jobs_in_flight,
                          got.retirement_rule, got.scale_in_protected,
                          got.identity),
                         (["a"], 1, "max_lifetime", True, "w.example"))
        [call] = worker.of(Unary)
        self.assertEqual(call.method, "Status")
        with self.assertRaises(ValueError):
            worker.run(_core.status(timeout=0))

    def test_a_page_that_does_not_move_on_is_a_protocol_error(self):
        worker = ScriptedWorker(replies=[page("a", token="t"),
                                         page("a", token="t")])
        with self.assertRaises(cfdb_worker.RpcError):
            worker.run(_core.jobs())

    def test_a_page_size_out_of_range_makes_no_call(self):
        worker = ScriptedWorker()
        for size in (-1, 1001, 2.5, True):
            with self.assertRaises(ValueError):
                worker.run(_core.jobs_page(page_size=size))
        self.assertEqual(worker.steps, [])


class SubmitTest(unittest.TestCase):
    def test_submit_returns_at_accepted_and_reads_no_further(self):
        worker = ScriptedWorker([ACCEPTED, stdout(b"never read"), EXIT_0])
        submitted = worker.run(_core.submit(["x"], job_id="s", stdin=b"in"))
        self.assertEqual(submitted, cfdb_worker.Submitted("s"))
        [stream] = worker.of(Stream)
        self.assertEqual((stream.method, stream.request.detach_grace_seconds,
                          stream.request.exec.stdin), ("Dispatch", -1.0,
                                                       b"in"))
        self.assertEqual(len(worker.of(Next)), 1)

    def test_submit_of_a_job_that_exists_says_so(self):
        attached = event(attached=worker_pb2.Attached())
        worker = ScriptedWorker([attached])
        submitted = worker.run(_core.submit(["x"], job_id="s",
                                            attach_if_exists=True))
        self.assertTrue(submitted.existed)
        self.assertTrue(worker.of(Stream)[0].request.attach_if_exists)

    def test_a_grace_of_zero_or_a_streamed_stdin_makes_no_call(self):
        worker = ScriptedWorker()
        with self.assertRaises(ValueError):
            worker.run(_core.submit(["x"], detach_grace=0))
        with self.assertRaises(TypeError):
            worker.run(_core.submit(["x"], stdin=iter([b"x"])))
        self.assertEqual(worker.steps, [])

    def test_a_refusal_is_raised_by_its_kind(self):
        worker = ScriptedWorker([Failed(grpc.StatusCode.ALREADY_EXISTS,
                                        "job_id: a job of this id")])
        with self.assertRaises(cfdb_worker.AlreadyExists):
            worker.run(_core.submit(["x"], job_id="s"))


class DispatchTest(unittest.TestCase):
    def test_a_take_over_ends_the_dispatch_without_attaching_again(self):
        taken = Failed(grpc.StatusCode.ABORTED, "taken over by an Attach")
        worker = ScriptedWorker([ACCEPTED, stdout(b"abc"), taken])
        with self.assertRaises(cfdb_worker.TakenOver):
            worker.run(_core.dispatch(["x"], detach_grace=30))
        self.assertEqual((len(worker.of(Stream)), worker.of(Sleep)), (1, []))

    def test_output_skipped_is_counted_lost(self):
        worker = ScriptedWorker([ACCEPTED, stdout(b"ab"),
                                 stdout(b"yz", offset=10, lost=8), EXIT_0])
        result = worker.run(_core.dispatch(["x"]))
        self.assertEqual((result.stdout, result.lost),
                         (b"abyz", cfdb_worker.Offsets(8, 0)))

    def test_attach_follows_unless_it_takes_over(self):
        for take_over in (False, True):
            worker = ScriptedWorker([event(attached=worker_pb2.Attached()),
                                     EXIT_0])
            worker.run(_core.attach("j", take_over=take_over))
            [stream] = worker.of(Stream)
            self.assertEqual(stream.request.take_over, take_over)

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
