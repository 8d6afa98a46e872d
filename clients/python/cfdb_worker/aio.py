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
from typing import Any, AsyncIterator, Optional

import grpc
import grpc.aio

from cfdb_worker._common import (Event, StdinSource, chunks_of, end_of_input,
                                 input_chunk, read_blocking, read_fd)
from cfdb_worker._core import AsyncOperations
from cfdb_worker._steps import (Emit, Input, InputFailed, Next, Pumped,
                                ReadAll, Run, Sleep, Step, Stream, Unary)

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


class _InputPump:
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
                await self._write(input_chunk(data))
            if self._stopped.is_set():
                return
            await self._write(end_of_input())
            await self._call.done_writing()
        except asyncio.CancelledError:
            pass
        except grpc.RpcError:
            pass  # the call is over; its reader says how
        except Exception as e:  # noqa: BLE001: given to the caller
            self.error = e
            self._call.cancel()


class _Stream(Pumped):
    """One streaming call on the loop and, with stdin, its input pump."""

    def __init__(self, method: Any, step: Stream) -> None:
        self._pump: Optional[_InputPump] = None
        self._first: Any = None
        if step.stdin is None:
            self._call = method(step.request, timeout=step.timeout)
        else:
            self._call = method(timeout=step.timeout)
            self._pump = _InputPump(self._call, step.stdin)
            self._first = step.request  # written before the first read
        self._messages = self._call.__aiter__()

    async def next(self) -> Any:
        if self._first is not None:
            first, self._first = self._first, None
            try:
                await self._call.write(first)
            except grpc.RpcError:
                pass  # the call is over already; reading it says how
        try:
            return await self._messages.__anext__()
        except StopAsyncIteration:
            self.end()
            return None
        except (grpc.RpcError, asyncio.CancelledError):
            self.end()
            # A call cancelled by the pump on a read error: say that, not
            # the cancellation (else the task's own cancellation, as is).
            if self._pump is not None and self._pump.error is not None:
                raise InputFailed(self._pump.error) from None
            raise


class AsyncWorkerConnection(AsyncOperations):
    """Talks to one worker at `address` ("host:port", or "unix:PATH", always
    without TLS) on asyncio, with the blocking WorkerConnection's surface
    and errors; every call is a coroutine (events() and attach_events()
    async iterators). `credentials` (cfdb_worker.Credentials) for mutual
    TLS; None for plaintext. Use it from the event loop it was made on;
    many calls may be in flight at once. `async with` (or close()) releases
    the channel, cancelling calls still in flight."""

    _grpc = grpc.aio

    async def close(self) -> None:
        """Releases the channel, cancelling calls in flight; later calls
        raise ValueError."""
        self._closed = True
        await self._channel.close()

    async def __aenter__(self) -> "AsyncWorkerConnection":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _open(self, step: Stream) -> _Stream:
        return _Stream(self._method(step.method), step)

    async def _go(self, run: Run[Any]) -> AsyncIterator[Event]:
        try:
            while run.step is not None:
                step = run.step
                if isinstance(step, Emit):
                    yield step.event
                    run.reply()
                    continue
                try:
                    reply = await self._do(step)
                except (grpc.RpcError, InputFailed) as e:
                    run.fail(e)
                else:
                    run.reply(reply)
        finally:
            for stream in run.streams:
                stream.end()
            run.close()

    async def _do(self, step: Step) -> Any:
        if isinstance(step, Unary):
            return await self._method(step.method)(step.request,
                                                   timeout=step.timeout)
        if isinstance(step, Stream):
            return self._open(step)
        if isinstance(step, Next):
            return await step.stream.next()
        if isinstance(step, ReadAll):
            return b"".join([data async for data in
                             _chunks(step.source, asyncio.Event())])
        if isinstance(step, Input):
            step.stream.input(step.go)
        elif isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
        else:
            raise TypeError(f"not a step: {step!r}")
        return None
