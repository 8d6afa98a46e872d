"""WorkerConnection: one worker's idle, stop, health, and its jobs as
handles (dispatch, attach, list, cancel), blocking. The operations are
cfdb_worker._core's; this runs their steps on a grpc channel."""
import threading
import time
from typing import Any, Iterator, Optional

import grpc

from cfdb_worker._common import (Accepted, Attached, Event, Exit, Failure,
                                 InputClosed, JobInfo, JobResult, Offsets,
                                 Outcome, Output, StdinSource, StopSummary,
                                 end_of_input, input_chunk, read_all,
                                 read_blocking, read_fd)
from cfdb_worker._core import SyncOperations
from cfdb_worker._steps import (Emit, Input, InputFailed, Next, Pumped,
                                ReadAll, Run, Sleep, Step, Stream, Unary)

__all__ = ["Accepted", "Attached", "Event", "Exit", "Failure", "InputClosed",
           "JobInfo", "JobResult", "Offsets", "Outcome", "Output",
           "StopSummary", "WorkerConnection"]


class _InputPump:
    """The request iterator of a DispatchStream call: the request, then,
    once the job is accepted, the source's chunks, read only as gRPC sends
    them (it asks for the next once the last was sent, which its flow
    control holds until the worker has room: a bounded window end to end),
    then end_of_input. stop() ends the reading (input_closed, the call's
    end). Runs on gRPC's request thread; a read error cancels the call."""

    def __init__(self, first: Any, source: StdinSource) -> None:
        self._first = first
        self._source = source
        self._go = threading.Event()
        self._stopped = False
        self.error: Optional[BaseException] = None
        self.call: Any = None

    def start(self) -> None:
        self._go.set()

    def stop(self, call_ended: bool = False) -> None:
        """Reads no more: the request iterator ends at its next turn.
        `call_ended` changes nothing here (the iterator is gRPC's, which
        asks for nothing more once the call has ended)."""
        self._stopped = True
        self._go.set()

    def __iter__(self) -> Iterator[Any]:
        yield self._first
        self._go.wait()
        if self._stopped:
            return  # never accepted: none of the source is read
        try:
            if isinstance(self._source, int):
                while not self._stopped:
                    data = read_fd(self._source, lambda: self._stopped)
                    if data is None:
                        return
                    if not data:
                        break
                    yield input_chunk(data)
            else:
                for data in read_blocking(self._source):
                    if self._stopped:
                        return
                    yield input_chunk(data)
        except Exception as e:  # noqa: BLE001: given to the caller
            self.error = e
            self.call.cancel()
            return
        if not self._stopped:
            yield end_of_input()


class _Stream(Pumped):
    """One streaming call and, with stdin, its input pump. Not
    thread-safe."""

    def __init__(self, method: Any, step: Stream) -> None:
        self._pump: Optional[_InputPump] = None
        if step.stdin is None:
            self._call = method(step.request, timeout=step.timeout)
        else:
            self._pump = _InputPump(step.request, step.stdin)
            self._call = self._pump.call = method(iter(self._pump),
                                                  timeout=step.timeout)

    def next(self) -> Any:
        try:
            message = next(self._call, None)
        except grpc.RpcError:
            self.end()
            # A pump's read error cancelled the call: that error, not the
            # cancellation it caused.
            if self._pump is not None and self._pump.error is not None:
                raise InputFailed(self._pump.error) from None
            raise
        if message is None:
            self.end()
        return message


class WorkerConnection(SyncOperations):
    """Talks to one worker at `address` ("host:port", or "unix:PATH" for a
    worker's --uds socket, always without TLS). `credentials`
    (cfdb_worker.Credentials) for mutual TLS; None for plaintext. Each call
    blocks until its answer or its timeout and raises a
    cfdb_worker.WorkerError subclass when it fails. Safe to share between
    threads; close() (or a `with` block) releases the channel."""

    _grpc = grpc

    def close(self) -> None:
        """Releases the channel; later calls raise ValueError."""
        self._closed = True
        self._channel.close()

    def __enter__(self) -> "WorkerConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _open(self, step: Stream) -> _Stream:
        return _Stream(self._method(step.method), step)

    def _go(self, run: Run[Any]) -> Iterator[Event]:
        try:
            while run.step is not None:
                step = run.step
                if isinstance(step, Emit):
                    yield step.event
                    run.reply()
                    continue
                try:
                    reply = self._do(step)
                except (grpc.RpcError, InputFailed) as e:
                    run.fail(e)
                else:
                    run.reply(reply)
        finally:
            for stream in run.streams:
                stream.end()
            run.close()

    def _do(self, step: Step) -> Any:
        if isinstance(step, Unary):
            return self._method(step.method)(step.request,
                                             timeout=step.timeout)
        if isinstance(step, Stream):
            return self._open(step)
        if isinstance(step, Next):
            return step.stream.next()
        if isinstance(step, ReadAll):
            return read_all(step.source)
        if isinstance(step, Input):
            step.stream.input(step.go)
        elif isinstance(step, Sleep):
            time.sleep(step.seconds)
        else:
            raise TypeError(f"not a step: {step!r}")
        return None
