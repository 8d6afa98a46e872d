"""WorkerConnection: one worker's idle, stop, health, and its jobs as
handles (dispatch, attach, list, cancel), blocking."""
import threading
import time
from typing import (Any, Dict, Iterator, List, Optional, Sequence, Tuple)

import grpc

from cfdb_worker import errors
from cfdb_worker._common import (Accepted, Attached, DEFAULT_OPTIONS, Event,
                                 Exit, Failure, InputClosed, InputPump,
                                 JobInfo, JobReader, JobResult, Offsets,
                                 Outcome, Output, Reattach, StdinSource,
                                 StopSummary, Stubs, attach_request,
                                 call_failed, cancel_outcome, cancel_request,
                                 check_size, job_info, job_request,
                                 on_message, positive, read_all,
                                 read_blocking, read_fd, serving, stop_request)
from cfdb_worker._wire import worker_pb2
from cfdb_worker.credentials import Credentials

__all__ = ["Accepted", "Attached", "Event", "Exit", "Failure", "InputClosed",
           "JobInfo", "JobResult", "Offsets", "Outcome", "Output",
           "StopSummary", "WorkerConnection"]


def channel_options(options: Sequence[Tuple[str, Any]]) -> List[Tuple[str,
                                                                      Any]]:
    """The default channel options, overridden by the caller's."""
    given = {key for key, _ in options}
    return [option for option in DEFAULT_OPTIONS
            if option[0] not in given] + list(options)


class _InputPump(InputPump):
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

    def stop(self) -> None:
        self._stopped = True
        self._go.set()

    def __iter__(self) -> Iterator[Any]:
        yield worker_pb2.DispatchInput(request=self._first)
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
                    yield worker_pb2.DispatchInput(stdin=data)
            else:
                for data in read_blocking(self._source):
                    if self._stopped:
                        return
                    yield worker_pb2.DispatchInput(stdin=data)
        except Exception as e:  # noqa: BLE001: given to the caller
            self.error = e
            self.call.cancel()
            return
        if not self._stopped:
            yield worker_pb2.DispatchInput(
                end_of_input=worker_pb2.EndOfInput())


class WorkerConnection(Stubs):
    """Talks to one worker at `address` ("host:port", or "unix:PATH" for a
    worker's --uds socket, always without TLS). `credentials`
    (cfdb_worker.Credentials) for mutual TLS; None for plaintext. Each call
    blocks until its answer or its timeout and raises a
    cfdb_worker.WorkerError subclass when it fails. Safe to share between
    threads; close() (or a `with` block) releases the channel."""

    def __init__(self, address: str,
                 credentials: Optional[Credentials] = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        if not address:
            raise ValueError("worker address is empty")
        self.address = address
        merged = channel_options(options)
        if credentials is None or address.startswith("unix:"):
            self._channel = grpc.insecure_channel(address, merged)
        else:
            self._channel = grpc.secure_channel(
                address, credentials.channel_credentials(),
                merged + credentials.channel_options())
        self._bind(self._channel)

    def _unary(self, rpc: str, method: Any, request: Any,
               timeout: Optional[float]) -> Any:
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise errors.classify(rpc, e) from None

    def idle(self, timeout: float = 5.0) -> float:
        """Seconds since the worker's docket last became empty (startup
        counts as empty); 0.0 while any job runs. ValueError for a timeout
        that is not positive (no call is made); IdleUnavailable when the
        worker predates the Idle RPC."""
        reply = self._unary("idle", self._stub.Idle, worker_pb2.IdleRequest(),
                            positive("timeout", timeout))
        return float(reply.seconds)

    def stop(self, grace: float, timeout: Optional[float] = None,
             if_idle_for: Optional[float] = None) -> StopSummary:
        """Stops the worker with a drain grace in seconds: 0 cancels the
        jobs in flight now, > 0 lets them run up to that long, < 0 without
        limit. Returns once the drain is over. `timeout` bounds the call
        (default: the grace and a minute more, a day without limit).
        With `if_idle_for` (seconds), a conditional stop: the worker stops
        only if its docket has been empty that long and no detached job's
        result is unread, decided atomically with admission; StillBusy
        otherwise, and it keeps serving."""
        request, timeout = stop_request(grace, timeout, if_idle_for)
        reply = self._unary("stop", self._stub.Stop, request, timeout)
        return StopSummary(reply.drained, reply.cancelled)

    def events(self, argv: Sequence[str], *,
               env: Optional[Dict[str, str]] = None, cwd: str = "",
               stdin: Optional[StdinSource] = None,
               time_limit: Optional[float] = None,
               job_id: Optional[str] = None, timeout: Optional[float] = None,
               payload: bytes = b"", kind: str = "exec",
               detach_grace: float = 0.0, attach_if_exists: bool = False,
               drop_oldest: bool = False) -> Iterator[Event]:
        """Runs `argv` (no shell) on the worker with exactly `env` (nothing
        else is inherited), `cwd` and `time_limit` seconds, and yields its
        events over one call: Accepted (or Attached, with
        attach_if_exists, for a job of that id that exists), Output
        chunks with their offsets, at most one InputClosed, then one Exit
        or Failure. Bad arguments raise here (ValueError, TypeError).

        `stdin`: bytes (up to 1 MiB go whole in the request), or, streamed
        as the job reads it (DispatchStream), larger bytes, a binary file
        object, an iterable of bytes or an os file descriptor (not
        closed). A worker without DispatchStream gets it whole.
        `job_id` names the job (default: a fresh "py-UUID"); a second job of
        an id that runs or is retained is refused (AlreadyExists) unless
        `attach_if_exists`. `detach_grace`: how long the job runs on once
        no call is attached (0: cancelled at once; < 0: without limit).
        `drop_oldest`: a full output buffer drops its oldest bytes rather
        than pausing the job. `timeout` bounds the whole call.

        Errors are raised as the iteration reaches them: before Accepted
        TransientRpcError means retrying may work (a call lost on the way
        may have been accepted all the same: resend it with the same
        job_id and attach_if_exists, as dispatch() finds out by attaching);
        after it, OutcomeUnknown or AcceptedDeadlineExceeded: never resend
        blindly (attach to it: dispatch() does)."""
        request, source = job_request(argv, env, cwd, stdin, time_limit,
                                      job_id, payload, kind, detach_grace,
                                      attach_if_exists, drop_oldest)
        reader = JobReader(request.job_id, gather=False)
        return self._job_events(request, source, reader,
                                positive("timeout", timeout))

    def dispatch(self, argv: Sequence[str], *,
                 env: Optional[Dict[str, str]] = None, cwd: str = "",
                 stdin: Optional[StdinSource] = None,
                 time_limit: Optional[float] = None,
                 job_id: Optional[str] = None,
                 timeout: Optional[float] = None, payload: bytes = b"",
                 kind: str = "exec", detach_grace: float = 0.0,
                 attach_if_exists: bool = False, drop_oldest: bool = False,
                 reattach: bool = True) -> JobResult:
        """events(), gathered: the job's end and its whole output. When the
        stream is lost after the job started (OutcomeUnknown), it attaches
        again from the offsets it got to, with a backoff (0.5 s doubling to
        10 s), for the job's detach grace (at least 10 s, a minute without
        limit) and within `timeout`: the job's own end comes back, not
        the lost stream. A stream lost on the way before Accepted came is
        attached to as well, to see whether the job started:
        TransientRpcError only when no job of its id is there (or no worker
        answers). Without reattach=False, OutcomeUnknown remains only for a
        worker that is really gone, once the job started (or NotFound: one
        that no longer knows the job, e.g. restarted)."""
        request, source = job_request(argv, env, cwd, stdin, time_limit,
                                      job_id, payload, kind, detach_grace,
                                      attach_if_exists, drop_oldest)
        timeout = positive("timeout", timeout)
        policy = Reattach(request.detach_grace_seconds, timeout, reattach)
        reader = JobReader(request.job_id)
        events = self._job_events(request, source, reader, timeout)
        while True:
            try:
                for _ in events:
                    pass
                return reader.result()
            except errors.WorkerError as e:
                delay = policy.delay_after(e)
            time.sleep(delay)
            events = self._attach_events(request.job_id, reader.offsets,
                                         reader, policy.timeout())

    def attach_events(self, job_id: str, offsets: Optional[Offsets] = None,
                      timeout: Optional[float] = None) -> Iterator[Event]:
        """Reads job `job_id`'s events again from byte `offsets` (stdout,
        stderr; default the start of what is kept): Attached, Output from
        there (each with its offset), live, then its Exit or Failure.
        This call becomes the job's one attached call: the one attached
        before ends (OutcomeUnknown, code ABORTED). NotFound for an unknown
        or expired id. A failure after Attached leaves the job running,
        detached, with its detach grace counted anew."""
        reader = JobReader(job_id, gather=False)
        request = attach_request(job_id, offsets)
        return self._read("attach", self._stub.Attach(
            request, timeout=positive("timeout", timeout)), reader)

    def attach(self, job_id: str, offsets: Optional[Offsets] = None,
               timeout: Optional[float] = None) -> JobResult:
        """attach_events(), gathered: the job's end and its output from
        `offsets` (JobResult.lost: bytes the worker no longer kept)."""
        reader = JobReader(job_id)
        for _ in self._attach_events(job_id, offsets, reader,
                                     positive("timeout", timeout)):
            pass
        return reader.result()

    def jobs(self, timeout: float = 5.0) -> List[JobInfo]:
        """The jobs the worker runs or retains, oldest first."""
        reply = self._unary("jobs", self._stub.ListJobs,
                            worker_pb2.ListJobsRequest(),
                            positive("timeout", timeout))
        return [job_info(job) for job in reply.jobs]

    def cancel(self, job_id: str, grace: float,
               timeout: Optional[float] = None) -> Outcome:
        """Cancels one job: SIGTERM to its processes, SIGKILL after `grace`
        seconds (0: at once); returns its end (Exit or Failure) once it has
        ended. NotFound for an unknown or expired id. `timeout` bounds the
        call (default: the grace and a minute more)."""
        request = cancel_request(job_id, grace)
        reply = self._unary("cancel", self._stub.Cancel, request, positive(
            "timeout", request.grace_seconds + 60.0
            if timeout is None else timeout))
        return cancel_outcome(reply)

    def health(self, timeout: float = 5.0) -> bool:
        """True while the worker's gRPC health service says SERVING (it
        turns NOT_SERVING the moment a drain begins)."""
        reply = self._unary("health", self._health, b"",
                            positive("timeout", timeout))
        return serving(reply)

    def close(self) -> None:
        """Releases the channel; later calls raise ValueError."""
        self._closed = True
        self._channel.close()

    def __enter__(self) -> "WorkerConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _attach_events(self, job_id: str, offsets: Optional[Offsets],
                       reader: JobReader,
                       timeout: Optional[float]) -> Iterator[Event]:
        reader.begin_call()
        return self._read("attach", self._stub.Attach(
            attach_request(job_id, offsets), timeout=timeout), reader)

    def _job_events(self, request: Any, source: Optional[StdinSource],
                    reader: JobReader,
                    timeout: Optional[float]) -> Iterator[Event]:
        reader.begin_call()
        if source is None:
            yield from self._read("dispatch", self._stub.Dispatch(
                request, timeout=timeout), reader)
            return
        pump = _InputPump(request, source)
        pump.call = self._stub.DispatchStream(iter(pump), timeout=timeout)
        try:
            yield from self._read("dispatch", pump.call, reader, pump)
            return
        except errors.RpcError as e:
            if e.code != grpc.StatusCode.UNIMPLEMENTED or reader.started:
                raise
        # A worker from before DispatchStream: none of the source was read
        # (that starts at acceptance), so it goes whole in the request.
        request.exec.stdin = read_all(source)
        check_size(request)
        yield from self._read("dispatch", self._stub.Dispatch(
            request, timeout=timeout), reader)

    def _read(self, rpc: str, call: Any, reader: JobReader,
              pump: Optional[_InputPump] = None) -> Iterator[Event]:
        try:
            for message in call:
                event = on_message(reader, message, pump)
                if event is not None:
                    yield event
                if reader.outcome is not None:
                    return
        except grpc.RpcError as e:
            raise call_failed(rpc, e, reader, pump) from None
        finally:
            if pump is not None:
                pump.stop()
            call.cancel()
        raise reader.no_end()

