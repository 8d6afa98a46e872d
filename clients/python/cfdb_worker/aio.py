"""AsyncWorkerConnection: the blocking client's surface on asyncio
(grpc.aio), for services that run on an event loop.

    from cfdb_worker.aio import AsyncWorkerConnection
    async with AsyncWorkerConnection("127.0.0.1:50051") as worker:
        result = await worker.dispatch(["make"], job_id="build-7",
                                       detach_grace=600)

Cancellation: cancelling the task that awaits a call (or leaving an
`async for` over events() early) cancels the call, never more. Whether that
cancels the job follows the job's detach grace (0, the default: the worker
cancels it at once; > 0: it runs on that long without a call attached; < 0:
without limit), so a detached job survives its caller's cancellation and
is attached to again with attach(). A streamed stdin cut short by the
cancellation always cancels its job: a truncated input never passes for a
whole one.
"""
import asyncio
from typing import (Any, AsyncIterator, Dict, List, Optional, Sequence,
                    Tuple)

import grpc
import grpc.aio

from cfdb_worker import errors
from cfdb_worker._common import (Event, InputPump, JobInfo, JobReader,
                                 JobResult, Offsets, Outcome, Reattach,
                                 StdinSource, StopSummary, Stubs,
                                 attach_request, call_failed, cancel_outcome,
                                 cancel_request, check_size, chunks_of,
                                 job_info, job_request, on_message, positive,
                                 read_blocking, read_fd, serving, stop_request)
from cfdb_worker._wire import worker_pb2
from cfdb_worker.credentials import Credentials
from cfdb_worker.connection import channel_options

__all__ = ["AsyncWorkerConnection"]


async def _chunks(source: StdinSource,
                  stopped: "asyncio.Event") -> AsyncIterator[bytes]:
    """The chunks of a stdin source: an async iterable of bytes as it
    comes; a file descriptor or a file object read on the loop's default
    executor (a blocking read never holds the loop); bytes in memory and
    sync iterables as they are."""
    loop = asyncio.get_running_loop()
    if hasattr(source, "__aiter__"):
        async for data in source:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"stdin yielded {type(data).__name__}, "
                                "not bytes")
            for chunk in chunks_of(data):
                yield chunk
    elif isinstance(source, int):
        while True:
            data = await loop.run_in_executor(None, read_fd, source,
                                              stopped.is_set)
            if not data:  # the end, or stopped
                return
            yield data
    elif hasattr(source, "read"):
        chunks = read_blocking(source)
        while True:
            data = await loop.run_in_executor(None, next, chunks, b"")
            if not data:
                return
            yield data
    else:
        for data in read_blocking(source):
            yield data


class _AsyncInputPump(InputPump):
    """Writes a DispatchStream call's input from a task of its own: the
    source's chunks once the job is accepted, each write awaited (gRPC's
    flow control holds it until the worker has room: a bounded window end
    to end), then end_of_input and the half-close. stop() ends it
    (input_closed, the call's end); a read error cancels the call. A write
    in progress is never cancelled before the call ends: grpc.aio cancels
    the whole call with it."""

    def __init__(self, call: Any, source: StdinSource) -> None:
        self._call = call
        self._source = source
        self._stopped = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None
        self._writing = False
        self.error: Optional[BaseException] = None

    def start(self) -> None:
        if self._task is None and not self._stopped.is_set():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self, call_ended: bool = False) -> None:
        """Reads no more: at once if no write is in progress (or the call
        has ended), else once the write is done."""
        self._stopped.set()
        if self._task is not None and (call_ended or not self._writing):
            self._task.cancel()

    async def _write(self, message: Any) -> None:
        self._writing = True
        try:
            await self._call.write(message)
        finally:
            self._writing = False

    async def _run(self) -> None:
        try:
            async for data in _chunks(self._source, self._stopped):
                if self._stopped.is_set():
                    return
                await self._write(worker_pb2.DispatchInput(stdin=data))
            if self._stopped.is_set():
                return
            await self._write(worker_pb2.DispatchInput(
                end_of_input=worker_pb2.EndOfInput()))
            await self._call.done_writing()
        except asyncio.CancelledError:
            pass
        except grpc.RpcError:
            pass  # the call is over; its reader says how
        except Exception as e:  # noqa: BLE001: given to the caller
            self.error = e
            self._call.cancel()


class AsyncWorkerConnection(Stubs):
    """Talks to one worker at `address` ("host:port", or "unix:PATH", always
    without TLS) on asyncio, with the blocking WorkerConnection's surface
    and errors; every call is a coroutine (events() and attach_events()
    async iterators). `credentials` (cfdb_worker.Credentials) for mutual
    TLS; None for plaintext. Use it from the event loop it was made on;
    many calls may be in flight at once. `async with` (or close()) releases
    the channel, cancelling calls still in flight."""

    def __init__(self, address: str,
                 credentials: Optional[Credentials] = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        if not address:
            raise ValueError("worker address is empty")
        self.address = address
        merged = channel_options(options)
        if credentials is None or address.startswith("unix:"):
            self._channel = grpc.aio.insecure_channel(address, merged)
        else:
            self._channel = grpc.aio.secure_channel(
                address, credentials.channel_credentials(),
                merged + credentials.channel_options())
        self._bind(self._channel)

    async def _unary(self, rpc: str, method: Any, request: Any,
                     timeout: Optional[float]) -> Any:
        try:
            return await method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise errors.classify(rpc, e) from None

    async def idle(self, timeout: float = 5.0) -> float:
        """WorkerConnection.idle: the worker's idle seconds."""
        reply = await self._unary("idle", self._stub.Idle,
                                  worker_pb2.IdleRequest(),
                                  positive("timeout", timeout))
        return float(reply.seconds)

    async def stop(self, grace: float, timeout: Optional[float] = None,
                   if_idle_for: Optional[float] = None) -> StopSummary:
        """WorkerConnection.stop: a drain grace, and with `if_idle_for` a
        conditional stop (StillBusy when refused)."""
        request, timeout = stop_request(grace, timeout, if_idle_for)
        reply = await self._unary("stop", self._stub.Stop, request, timeout)
        return StopSummary(reply.drained, reply.cancelled)

    def events(self, argv: Sequence[str], *,
               env: Optional[Dict[str, str]] = None, cwd: str = "",
               stdin: Optional[StdinSource] = None,
               time_limit: Optional[float] = None,
               job_id: Optional[str] = None, timeout: Optional[float] = None,
               payload: bytes = b"", kind: str = "exec",
               detach_grace: float = 0.0, attach_if_exists: bool = False,
               drop_oldest: bool = False) -> AsyncIterator[Event]:
        """WorkerConnection.events, as an async iterator; `stdin` may also
        be an async iterable of bytes."""
        request, source = job_request(argv, env, cwd, stdin, time_limit,
                                      job_id, payload, kind, detach_grace,
                                      attach_if_exists, drop_oldest)
        reader = JobReader(request.job_id, gather=False)
        return self._job_events(request, source, reader,
                                positive("timeout", timeout))

    async def dispatch(self, argv: Sequence[str], *,
                       env: Optional[Dict[str, str]] = None, cwd: str = "",
                       stdin: Optional[StdinSource] = None,
                       time_limit: Optional[float] = None,
                       job_id: Optional[str] = None,
                       timeout: Optional[float] = None, payload: bytes = b"",
                       kind: str = "exec", detach_grace: float = 0.0,
                       attach_if_exists: bool = False,
                       drop_oldest: bool = False,
                       reattach: bool = True) -> JobResult:
        """WorkerConnection.dispatch: the job's end and whole output,
        attaching again after a lost stream."""
        request, source = job_request(argv, env, cwd, stdin, time_limit,
                                      job_id, payload, kind, detach_grace,
                                      attach_if_exists, drop_oldest)
        timeout = positive("timeout", timeout)
        policy = Reattach(request.detach_grace_seconds, timeout, reattach)
        reader = JobReader(request.job_id)
        events = self._job_events(request, source, reader, timeout)
        while True:
            try:
                async for _ in events:
                    pass
                return reader.result()
            except errors.WorkerError as e:
                delay = policy.delay_after(e)
            await asyncio.sleep(delay)
            events = self._attach_events(request.job_id, reader.offsets,
                                         reader, policy.timeout())

    def attach_events(self, job_id: str, offsets: Optional[Offsets] = None,
                      timeout: Optional[float] = None
                      ) -> AsyncIterator[Event]:
        """WorkerConnection.attach_events, as an async iterator."""
        return self._attach_events(job_id, offsets,
                                   JobReader(job_id, gather=False),
                                   positive("timeout", timeout))

    async def attach(self, job_id: str, offsets: Optional[Offsets] = None,
                     timeout: Optional[float] = None) -> JobResult:
        """WorkerConnection.attach: the job's end and its output from
        `offsets`."""
        reader = JobReader(job_id)
        async for _ in self._attach_events(job_id, offsets, reader,
                                           positive("timeout", timeout)):
            pass
        return reader.result()

    async def jobs(self, timeout: float = 5.0) -> List[JobInfo]:
        """WorkerConnection.jobs: what the worker runs or retains."""
        reply = await self._unary("jobs", self._stub.ListJobs,
                                  worker_pb2.ListJobsRequest(),
                                  positive("timeout", timeout))
        return [job_info(job) for job in reply.jobs]

    async def cancel(self, job_id: str, grace: float,
                     timeout: Optional[float] = None) -> Outcome:
        """WorkerConnection.cancel: TERM, KILL after `grace`; the job's
        end."""
        request = cancel_request(job_id, grace)
        reply = await self._unary("cancel", self._stub.Cancel, request,
                                  positive("timeout",
                                           request.grace_seconds + 60.0
                                           if timeout is None else timeout))
        return cancel_outcome(reply)

    async def health(self, timeout: float = 5.0) -> bool:
        """WorkerConnection.health: True while SERVING."""
        reply = await self._unary("health", self._health, b"",
                                  positive("timeout", timeout))
        return serving(reply)

    async def close(self) -> None:
        """Releases the channel, cancelling calls in flight; later calls
        raise ValueError."""
        self._closed = True
        await self._channel.close()

    async def __aenter__(self) -> "AsyncWorkerConnection":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _attach_events(self, job_id: str, offsets: Optional[Offsets],
                       reader: JobReader,
                       timeout: Optional[float]) -> AsyncIterator[Event]:
        reader.begin_call()
        return self._read("attach", self._stub.Attach(
            attach_request(job_id, offsets), timeout=timeout), reader)

    async def _job_events(self, request: Any, source: Optional[StdinSource],
                          reader: JobReader,
                          timeout: Optional[float]) -> AsyncIterator[Event]:
        reader.begin_call()
        if source is not None:
            call = self._stub.DispatchStream(timeout=timeout)
            pump = _AsyncInputPump(call, source)
            try:
                await call.write(worker_pb2.DispatchInput(request=request))
            except grpc.RpcError:
                pass  # the call is over already; reading it says how
            try:
                async for event in self._read("dispatch", call, reader,
                                              pump):
                    yield event
                return
            except errors.RpcError as e:
                if e.code != grpc.StatusCode.UNIMPLEMENTED or reader.started:
                    raise
            # A worker from before DispatchStream: none of the source was
            # read (that starts at acceptance), so it goes whole in the
            # request.
            stopped = asyncio.Event()
            request.exec.stdin = b"".join(
                [data async for data in _chunks(source, stopped)])
            check_size(request)
        async for event in self._read("dispatch", self._stub.Dispatch(
                request, timeout=timeout), reader):
            yield event

    async def _read(self, rpc: str, call: Any, reader: JobReader,
                    pump: Optional[_AsyncInputPump] = None
                    ) -> AsyncIterator[Event]:
        try:
            async for message in call:
                event = on_message(reader, message, pump)
                if event is not None:
                    yield event
                if reader.outcome is not None:
                    return
        except grpc.RpcError as e:
            raise call_failed(rpc, e, reader, pump) from None
        except asyncio.CancelledError:
            # A cancelled call: by the pump on a read error (say that), or
            # the task's own cancellation.
            if pump is not None and pump.error is not None:
                raise pump.failure() from None
            raise
        finally:
            if pump is not None:
                pump.stop(call_ended=True)
            call.cancel()
        raise reader.no_end()
