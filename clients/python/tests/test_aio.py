"""cfdb_worker.aio on an event loop of its own, against real workers: what
only asyncio has (the rest of its contract runs in test_client,
test_handles and test_stdin, call for call with the blocking client):
cancelling the awaiting task, async iterables of stdin, asyncio.gather
over a fleet, the async context manager."""
import asyncio
import hashlib
import os
import shutil
import tempfile
import unittest

import cfdb_worker
from cfdb_worker.aio import AsyncWorkerConnection
from support import Worker


async def until(predicate, timeout=10.0):
    """Awaits `predicate()` (a coroutine function) until it is true."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.02)
    return await predicate()


class AioTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.worker = Worker()
        self.addCleanup(self.worker.kill)

    async def asyncSetUp(self):
        self.c = AsyncWorkerConnection(self.worker.address)

    async def asyncTearDown(self):
        await self.c.close()

    async def job(self, job_id):
        for job in await self.c.jobs():
            if job.job_id == job_id:
                return job
        return None

    async def cancel_once_written(self, task, job_id):
        async def written():
            job = await self.job(job_id)
            return job is not None and job.written.stdout > 0
        self.assertTrue(await until(written))
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task

    async def test_cancelling_the_task_cancels_a_job_without_detach_grace(self):
        task = asyncio.create_task(self.c.dispatch(
            ["/bin/sh", "-c", "echo up; sleep 30"], job_id="plain"))
        await self.cancel_once_written(task, "plain")

        async def ended():
            job = await self.job("plain")
            return not job.running
        self.assertTrue(await until(ended))
        job = await self.job("plain")
        self.assertEqual(job.outcome.reason, "CANCELLED")
        self.assertLess(job.running_seconds, 10)

    async def test_a_detached_job_runs_on_past_its_callers_cancellation(self):
        task = asyncio.create_task(self.c.dispatch(
            ["/bin/sh", "-c", "echo one; sleep 1; echo two; exit 4"],
            job_id="detached", detach_grace=30))
        await self.cancel_once_written(task, "detached")
        result = await self.c.attach("detached")
        self.assertEqual(result.exit_code, 4)
        self.assertEqual(result.stdout, b"one\ntwo\n")

    async def test_cancelling_mid_upload_cancels_the_job_whatever_its_grace(
            self):
        sent = asyncio.Event()

        async def slow():
            while True:
                yield b"x" * 1000
                sent.set()
                await asyncio.sleep(0.01)
        task = asyncio.create_task(self.c.dispatch(
            ["/bin/sh", "-c", "echo up; cat >/dev/null"], job_id="upload",
            stdin=slow(), detach_grace=30))
        await asyncio.wait_for(sent.wait(), 60)  # not if nothing is read
        await self.cancel_once_written(task, "upload")

        async def ended():
            job = await self.job("upload")
            return not job.running
        self.assertTrue(await until(ended))
        self.assertEqual((await self.job("upload")).outcome.reason,
                         "CANCELLED")
        self.assertTrue(await until(lambda: self._idle()),
                        "the docket is empty again")

    async def _idle(self):
        return await self.c.idle() > 0

    async def test_an_async_iterable_streams_byte_exact(self):
        pieces = [bytes([i]) * (i * 7919) for i in range(64)]

        async def source():
            for piece in pieces:
                await asyncio.sleep(0)
                yield piece
        result = await self.c.dispatch(["sha256sum"], stdin=source())
        self.assertEqual(result.stdout.split()[0].decode(),
                         hashlib.sha256(b"".join(pieces)).hexdigest())

    async def test_events_is_an_async_iterator(self):
        events = [e async for e in self.c.events(["echo", "hi"])]
        self.assertEqual(events, [cfdb_worker.Accepted(),
                                  cfdb_worker.Output("stdout", b"hi\n", 0),
                                  cfdb_worker.Exit(code=0)])

    async def test_the_async_context_manager_closes_the_channel(self):
        async with AsyncWorkerConnection(self.worker.address) as c:
            self.assertTrue(await c.health())
        with self.assertRaises(ValueError):
            await c.idle()


class FleetTest(unittest.IsolatedAsyncioTestCase):
    """asyncio.gather over several workers: the fleet loop of the README,
    a conditional stop of the idle ones."""

    def setUp(self):
        self.workers = [Worker() for _ in range(4)]
        for worker in self.workers:
            self.addCleanup(worker.kill)

    async def test_a_conditional_stop_of_the_idle_workers(self):
        connections = [AsyncWorkerConnection(w.address) for w in self.workers]
        # Busy until the stops are done, however slow the machine.
        go = os.path.join(tempfile.mkdtemp(prefix="cfdb-aio-"), "go")
        self.addCleanup(shutil.rmtree, os.path.dirname(go))
        busy = asyncio.create_task(connections[0].dispatch(
            ["sh", "-c", 'until [ -e "$1" ]; do sleep 0.01; done', "sh", go],
            time_limit=120))
        self.assertTrue(await until(
            lambda: self._busy(connections[0])))
        idle = await asyncio.gather(*(c.idle() for c in connections))
        self.assertEqual(idle[0], 0.0)
        self.assertTrue(all(seconds > 0 for seconds in idle[1:]))
        stopped = await asyncio.gather(
            *(c.stop(grace=60, if_idle_for=0) for c in connections),
            return_exceptions=True)
        self.assertIsInstance(stopped[0], cfdb_worker.StillBusy)
        self.assertEqual(stopped[1:], [cfdb_worker.StopSummary(0, 0)] * 3)
        open(go, "w").close()
        self.assertTrue((await busy).ok, "the busy worker kept its job")
        for worker in self.workers[1:]:
            self.assertEqual(worker.wait(), 0)
        self.assertIsNone(self.workers[0].process.poll())
        for c in connections:
            await c.close()

    @staticmethod
    async def _busy(connection):
        return await connection.idle() == 0.0


if __name__ == "__main__":
    unittest.main()
