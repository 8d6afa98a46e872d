"""Jobs as handles from the blocking client, against real workers over TCP
plaintext, mutual TLS and the Unix socket: offsets, detach and attach from a
new process, submit and walk away, followers and take-over, duplicate ids,
cancel with a grace, the conditional stop, ListJobs and its pages, and
dispatch coming back to its job after a lost connection."""
import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import cfdb_worker
from cfdb_worker import Offsets
from support import TcpProxy, test_cases, wait_for

# Output a job writes, deterministic and large enough to come in several
# chunks: its bytes, then its exit code.
SEQ = "".join(f"{i}\n" for i in range(1, 20001)).encode()
SEQ_JOB = ["/bin/sh", "-c", "seq 1 20000; echo done >&2; sleep 1; exit 7"]

# A process that dispatches a detached job, says so once it is accepted,
# and waits to be killed.
DETACHING_CLIENT = """
import os, sys
from cfdb_worker import Credentials
from support import AsyncClient, BlockingClient
tls = os.environ.get("TEST_TLS_FILES")
client = AsyncClient() if sys.argv[1] == "aio" else BlockingClient()
c = client.open(sys.argv[2], tls and Credentials.from_files(
    *tls.split(os.pathsep)))
for event in c.events(sys.argv[4:], job_id=sys.argv[3], detach_grace=30):
    print(type(event).__name__, flush=True)
"""


class HandleTests:
    """Jobs as handles over one transport (a fixture of support.py)."""

    def connect(self, pem=None):
        return self.open(self.address(), self.credentials(pem))

    def test_status_names_the_job_in_flight_and_the_retirement(self):
        with self.connect() as c:
            c.submit(["sleep", "30"], job_id="status-1")
            state = c.status()
            c.cancel("status-1", grace=0)
            after = c.status()
        self.assertEqual((state.jobs_in_flight, state.job_ids,
                          state.other_jobs_in_flight), (1, ["status-1"], 0))
        self.assertEqual(state.idle_seconds, 0.0)
        self.assertFalse(state.draining)
        self.assertTrue(state.version)
        self.assertEqual(state.retirement_rule, "max_lifetime", "busy")
        self.assertGreater(state.retires_at_unix_seconds, time.time())
        self.assertEqual((after.jobs_in_flight, after.job_ids), (0, []))

    def test_output_events_carry_their_offsets(self):
        with self.connect() as c:
            # Two writes apart in time: at least two chunks of stdout.
            events = list(c.events(["/bin/sh", "-c", "seq 1 30000; "
                                    "sleep 0.3; seq 1 30000; "
                                    "seq 1 500 >&2"]))
        at = {"stdout": 0, "stderr": 0}
        for event in events:
            if isinstance(event, cfdb_worker.Output):
                self.assertEqual(event.offset, at[event.stream])
                at[event.stream] += len(event.data)
        expected = "".join(f"{i}\n" for i in range(1, 30001))
        self.assertEqual(at["stdout"], 2 * len(expected))
        self.assertEqual(at["stderr"], len("".join(f"{i}\n"
                                                   for i in range(1, 501))))
        self.assertGreaterEqual(sum(isinstance(e, cfdb_worker.Output) and
                                    e.stream == "stdout" for e in events), 2)

    def test_a_detached_job_outlives_its_client_and_is_attached_from_a_new_process(
            self):
        client = subprocess.Popen(
            [sys.executable, "-c", DETACHING_CLIENT, self.client_kind(),
             self.address(), "det-1",
             *SEQ_JOB], stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, **self.client_env()))
        self.assertEqual(client.stdout.readline().strip(), "Accepted")
        client.send_signal(signal.SIGKILL)
        client.wait()
        client.stdout.close()
        with self.connect() as c:
            whole = c.attach("det-1")
            middle = c.attach("det-1", Offsets(stdout=12345, stderr=2))
            listed = {job.job_id: job for job in c.jobs()}
        self.assertEqual(whole.exit_code, 7, "the job ran on to its end")
        self.assertEqual(whole.stdout, SEQ)
        self.assertEqual(whole.stderr, b"done\n")
        self.assertEqual(whole.lost, Offsets(0, 0))
        self.assertEqual(middle.stdout, SEQ[12345:])
        self.assertEqual(middle.stderr, b"ne\n")
        self.assertEqual(middle.exit_code, 7)
        job = listed["det-1"]
        self.assertFalse(job.running)
        self.assertEqual(job.program, "/bin/sh")
        self.assertEqual(job.written, Offsets(len(SEQ), 5))
        self.assertEqual(job.outcome, cfdb_worker.Exit(code=7))
        self.assertEqual(job.detach_grace_seconds, 30)

    def test_a_duplicate_id_is_refused_or_attached_to(self):
        with self.connect() as c, concurrent.futures.ThreadPoolExecutor() as pool:
            first = pool.submit(c.dispatch, SEQ_JOB, job_id="dup",
                                detach_grace=30)
            self.assertTrue(wait_for(lambda: any(
                j.job_id == "dup" for j in c.jobs())))
            with self.assertRaises(cfdb_worker.AlreadyExists) as raised:
                c.dispatch(["true"], job_id="dup")
            events = c.events(["true"], job_id="dup", attach_if_exists=True)
            self.assertIsInstance(next(events), cfdb_worker.Attached)
            # A follower: leaving early disturbs neither the job nor the
            # call that dispatched it.
            events.close()
            again = c.dispatch(["true"], job_id="dup", attach_if_exists=True)
            dispatched = first.result()
        self.assertEqual(raised.exception.exit_code, 67)
        self.assertEqual((dispatched.exit_code, dispatched.stdout), (7, SEQ))
        self.assertEqual((again.exit_code, again.stdout), (7, SEQ))

    def test_a_submitted_job_runs_on_and_another_connection_reads_it_whole(
            self):
        job = ["/bin/sh", "-c", "sleep 0.5; seq 1 20000; echo done >&2; "
               "exit 7"]
        with self.connect() as c:
            submitted = c.submit(job, job_id="walked", stdin=b"unread")
            with self.assertRaises(ValueError):
                c.submit(job, detach_grace=0)
            with self.assertRaises(TypeError):
                c.submit(["cat"], stdin=iter([b"streamed"]))
            again = c.submit(job, job_id="walked", attach_if_exists=True)
        self.assertEqual(submitted, cfdb_worker.Submitted(
            "walked", Offsets(0, 0)))
        self.assertTrue(again.existed)
        with self.connect() as other:
            self.assertTrue(wait_for(lambda: any(
                j.job_id == "walked" and j.readers == 0
                for j in other.jobs())), "no call reads it")
            [listed] = [j for j in other.jobs() if j.job_id == "walked"]
            whole = other.attach("walked", submitted.offsets)
            retained = other.attach("walked")
        self.assertTrue(listed.running, "closing the call left it running")
        self.assertLess(listed.detach_grace_seconds, 0)
        self.assertEqual((whole.exit_code, whole.stdout, whole.stderr),
                         (7, SEQ, b"done\n"))
        self.assertEqual(whole.lost, Offsets(0, 0))
        self.assertEqual(retained, whole)

    def test_followers_each_read_the_whole_job_and_disturb_nothing(self):
        job = ["/bin/sh", "-c", "seq 1 20000; sleep 2; seq 1 20000; "
               "echo done >&2; exit 7"]
        with self.connect() as c, self.connect() as a, self.connect() as b, \
                concurrent.futures.ThreadPoolExecutor() as pool:
            dispatched = pool.submit(c.dispatch, job, job_id="followed")
            self.assertTrue(wait_for(lambda: any(
                j.job_id == "followed" and j.written.stdout
                for j in c.jobs())), "the job writes")
            followers = [pool.submit(f.attach, "followed") for f in (a, b)]
            self.assertTrue(wait_for(lambda: any(
                j.job_id == "followed" and j.readers == 3
                for j in c.jobs())), "its dispatch and two followers read it")
            results = [f.result() for f in followers]
            result = dispatched.result()
        self.assertEqual((result.exit_code, result.stdout, result.stderr),
                         (7, SEQ + SEQ, b"done\n"))
        for got in results:
            self.assertEqual(got, result)

    def test_a_take_over_ends_the_dispatch_which_does_not_come_back(self):
        # Detach grace 0: the job outlives its dispatch's call all the same,
        # since that call no longer controls it.
        job = ["/bin/sh", "-c", "echo up; sleep 2; seq 1 20000; exit 7"]
        with self.connect() as c, self.connect() as taker, \
                concurrent.futures.ThreadPoolExecutor() as pool:
            first = pool.submit(c.dispatch, job, job_id="taken")
            self.assertTrue(wait_for(lambda: any(
                j.job_id == "taken" and j.written.stdout
                for j in c.jobs())), "the job writes")
            took = pool.submit(taker.attach, "taken", take_over=True)
            with self.assertRaises(cfdb_worker.TakenOver) as raised:
                first.result()
            self.assertFalse(took.done(), "the dispatch ended at the "
                             "take-over, not at the job's end")
            result = took.result()
        self.assertEqual(raised.exception.exit_code, 68)
        self.assertEqual(raised.exception.code.name, "ABORTED")
        self.assertEqual((result.exit_code, result.stdout),
                         (7, b"up\n" + SEQ))

    def test_cancel_with_a_grace_lets_the_job_end_by_itself(self):
        with self.connect() as c, concurrent.futures.ThreadPoolExecutor() as pool:
            job = pool.submit(c.dispatch, [
                "/bin/sh", "-c",
                "trap 'exit 3' TERM; echo ready; "
                "while :; do sleep 0.05; done"], job_id="trapper",
                time_limit=120)  # ends if the test fails before its cancel
            self.assertTrue(wait_for(lambda: any(
                j.job_id == "trapper" and j.written.stdout > 0
                for j in c.jobs())), "the trap is set")
            start = time.monotonic()
            ended = c.cancel("trapper", grace=10)
            took = time.monotonic() - start
            result = job.result()
            with self.assertRaises(cfdb_worker.NotFound) as missing:
                c.cancel("no-such-job", grace=0)
        # A cancelled job's end is CANCELLED, however it went: here TERM
        # alone ended it, well within the grace.
        self.assertEqual(ended.reason, "CANCELLED")
        self.assertNotIn("SIGKILL", ended.message)
        self.assertLess(took, 5)
        self.assertEqual(result.failure, ended)
        self.assertTrue(result.stdout.startswith(b"ready\n"))
        self.assertEqual(missing.exception.exit_code, 66)

    def test_the_conditional_stop_is_refused_while_busy(self):
        with self.connect() as c, concurrent.futures.ThreadPoolExecutor() as pool:
            job = pool.submit(c.dispatch, ["sleep", "3"])
            self.assertTrue(wait_for(lambda: c.idle() == 0.0))
            with self.assertRaises(cfdb_worker.StillBusy) as refused:
                c.stop(grace=0, if_idle_for=0)
            self.assertTrue(c.health(), "it keeps serving")
            self.assertTrue(job.result().ok)
            self.assertTrue(wait_for(lambda: c.idle() > 0.0))
            with self.assertRaises(cfdb_worker.StillBusy):
                c.stop(grace=0, if_idle_for=3600)
            summary = c.stop(grace=0, if_idle_for=0)
        self.assertEqual(refused.exception.exit_code, 65)
        self.assertEqual(summary, cfdb_worker.StopSummary(0, 0))
        self.assertEqual(self.worker.wait(), 0)

    def test_a_timeout_ends_the_call_and_the_job_follows_its_detach_grace(
            self):
        job = ["/bin/sh", "-c", "echo up; sleep 1.5; echo done"]
        with self.connect() as c:
            for job_id, grace in (("kept", 30), ("dropped", 0)):
                with self.assertRaises(
                        cfdb_worker.AcceptedDeadlineExceeded) as raised:
                    c.dispatch(job, job_id=job_id, detach_grace=grace,
                               timeout=0.8)
                self.assertEqual(raised.exception.exit_code, 73)
            # The worker sees the call end a moment after the client does;
            # an attach before that would read the job while it still runs.
            self.assertTrue(wait_for(lambda: any(
                j.job_id == "dropped" and not j.running
                for j in c.jobs())), "the call's end cancels the job")
            kept, dropped = c.attach("kept"), c.attach("dropped")
        self.assertEqual((kept.exit_code, kept.stdout), (0, b"up\ndone\n"))
        self.assertEqual(dropped.failure.reason, "CANCELLED")

    def test_payload_and_cwd(self):
        with tempfile.TemporaryDirectory() as directory, self.connect() as c:
            result = c.dispatch(["pwd"], cwd=directory, payload=b"\0opaque")
            self.assertEqual(result.stdout.decode().strip(),
                             os.path.realpath(directory))
            bad = c.dispatch(["pwd"], cwd=os.path.join(directory, "gone"))
        self.assertEqual(bad.failure.reason, "START_FAILED")


class PlaintextTests(HandleTests):
    """Over TCP plaintext, and through a proxy that cuts connections."""

    def test_jobs_reads_every_page_oldest_first(self):
        ids = [f"page-{i:03d}" for i in range(250)]
        with self.connect() as c:
            for job_id in ids:
                self.assertTrue(c.dispatch(["true"], job_id=job_id).ok)
            listed = c.jobs()
            first = c.jobs_page()
            small = c.jobs_page(page_size=3, page_token=first.next_page_token)
            with self.assertRaises(ValueError):
                c.jobs_page(page_size=1001)
            with self.assertRaises(cfdb_worker.RpcError):
                c.jobs_page(page_token="not a token of this worker")
        self.assertEqual([j.job_id for j in listed], ids,
                         "all of them, oldest first, none twice")
        self.assertEqual([j.job_id for j in first.jobs], ids[:100])
        self.assertTrue(first.next_page_token)
        self.assertEqual((first.others_running, first.others_ended), (0, 0))
        self.assertEqual([j.job_id for j in small.jobs], ids[100:103])

    def cut_once(self, proxy, seen):
        """Cuts every connection through `proxy` once `seen(job)` holds of
        a job the worker lists (read directly, by ListJobs), or once
        wait_for gives up: on a thread the test's cleanup joins. The cut
        comes whatever happens, a failed ListJobs too; a call that waits
        for it (one whose replies the proxy holds) never waits forever."""
        def listed(direct):
            try:
                return direct.jobs()
            except cfdb_worker.WorkerError:
                return []  # e.g. its deadline on a loaded machine: again

        def cut():
            try:
                with self.open(self.address()) as direct:
                    wait_for(lambda: any(seen(j) for j in listed(direct)))
            finally:
                proxy.cut()
        cutter = threading.Thread(target=cut)
        cutter.start()
        self.addCleanup(cutter.join)

    def through_proxy_cut_once_running(self, job_id):
        """A connection through a proxy whose connections are cut once job
        `job_id` has written output."""
        proxy = TcpProxy(self.worker.port)
        self.addCleanup(proxy.close)
        self.cut_once(proxy, lambda j: j.job_id == job_id and
                      j.written.stdout)
        return proxy, self.open(proxy.address)

    def test_dispatch_attaches_again_after_a_lost_connection(self):
        proxy, connection = self.through_proxy_cut_once_running("comes-back")
        with connection as c:
            result = c.dispatch(
                ["/bin/sh", "-c", "seq 1 20000; sleep 1.5; echo late; "
                 "exit 5"], job_id="comes-back", detach_grace=30)
        self.assertEqual(proxy.cuts, 1)
        self.assertEqual(result.exit_code, 5)
        self.assertEqual(result.stdout, SEQ + b"late\n")

    def test_a_stream_lost_after_accepted_is_outcome_unknown(self):
        proxy = TcpProxy(self.worker.port)
        self.addCleanup(proxy.close)
        with self.open(proxy.address) as c:
            events = c.events(["/bin/sh", "-c", "echo x; sleep 2"],
                              job_id="lost", detach_grace=30)
            self.assertIsInstance(next(events), cfdb_worker.Accepted)
            proxy.cut()
            with self.assertRaises(cfdb_worker.OutcomeUnknown):
                for _ in events:
                    pass
        # The job ran on. (A call at once on the cut connection may fail
        # as transient, UNAVAILABLE, while its channel reconnects.)
        with self.connect() as direct:
            self.assertEqual(direct.attach("lost").stdout, b"x\n")

    def through_proxy_holding_replies(self, job_id):
        """A connection through a proxy that holds back what the worker
        sends once the channel is ready (a dispatch's Accepted, too), cut
        once job `job_id` runs (seen directly, by ListJobs)."""
        proxy = TcpProxy(self.worker.port)
        self.addCleanup(proxy.close)
        proxy.hold_replies()
        self.cut_once(proxy, lambda j: j.job_id == job_id)
        return self.open(proxy.address)

    def test_dispatch_finds_its_job_when_its_accepted_was_lost(self):
        with self.through_proxy_holding_replies("unanswered") as c:
            result = c.dispatch(["/bin/sh", "-c", "seq 1 20000; sleep 0.5; "
                                 "exit 4"], job_id="unanswered",
                                detach_grace=30)
        self.assertEqual(result.exit_code, 4)
        self.assertEqual(result.stdout, SEQ)

    def test_without_reattach_a_lost_accepted_is_transient_and_the_job_runs(
            self):
        with self.through_proxy_holding_replies("unheard") as c:
            with self.assertRaises(cfdb_worker.TransientRpcError):
                c.dispatch(["/bin/sh", "-c", "echo y; sleep 0.5"],
                           job_id="unheard", detach_grace=30, reattach=False)
        with self.connect() as direct:
            self.assertEqual(direct.attach("unheard").stdout, b"y\n")


class MutualTlsTests(HandleTests):
    """Over mutual TLS, and what admission adds."""

    def test_an_observer_counts_others_jobs_but_cannot_attach_or_cancel(
            self):
        with self.connect() as c, self.connect(self.worker_pem) as observer:
            with concurrent.futures.ThreadPoolExecutor() as pool:
                job = pool.submit(c.dispatch, ["sleep", "3"], job_id="seen")
                self.assertTrue(wait_for(lambda: any(
                    j.job_id == "seen" for j in c.jobs())))
                running = observer.jobs_page()
                shown = observer.jobs()
                listed = [j for j in c.jobs() if j.job_id == "seen"]
                with self.assertRaises(cfdb_worker.PermissionDenied):
                    observer.attach("seen")
                with self.assertRaises(cfdb_worker.PermissionDenied):
                    observer.cancel("seen", grace=0)
                self.assertTrue(job.result().ok)
                ended = observer.jobs_page()
                own = c.jobs_page()
        # Another identity's job is only counted, never shown.
        self.assertEqual(running, cfdb_worker.JobsPage([], "", 1, 0))
        self.assertEqual(ended, cfdb_worker.JobsPage([], "", 0, 1))
        self.assertEqual(shown, [])
        self.assertEqual(([j.job_id for j in own.jobs], own.others_running,
                          own.others_ended), (["seen"], 0, 0))
        self.assertEqual(listed[0].client, "api.cfdb.internal")
        self.assertTrue(listed[0].attached)
        self.assertEqual(listed[0].readers, 1)


test_cases(globals(), PlaintextTests, HandleTests, MutualTlsTests)

if __name__ == "__main__":
    unittest.main()
