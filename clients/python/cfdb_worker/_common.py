"""What the operations (cfdb_worker._core) and both drivers share: the
limits, the events and results a caller sees, the requests sent and how
replies are read, how a job's events are read (offsets, protocol checks),
when dispatch attaches again after a lost stream, and the sources of
streamed stdin. Nothing here makes a call."""
import dataclasses
import math
import os
import select
import time
import uuid
from typing import (Any, AsyncIterable, BinaryIO, Callable, Dict, Iterable,
                    Iterator, List, NamedTuple, Optional, Sequence, Tuple,
                    Union)

import grpc

from cfdb_worker import errors
from cfdb_worker._wire import worker_pb2

# The worker's and the C++ client's limits and schedules
# (include/cfdb/worker/limits.h; tests/test_packaging.py compares).
MAX_MESSAGE_BYTES = 64 << 20  # the worker's receive limit
# A chunk of streamed stdin: as the C++ client and the CLI send it.
STDIN_CHUNK_BYTES = 256 << 10
# Attaching again after a lost stream: a backoff from RETRY_INITIAL_DELAY_*
# doubling to RETRY_MAX_DELAY_*, for the job's detach grace but at least
# REATTACH_MIN_WINDOW_*, or REATTACH_UNLIMITED_WINDOW_* for a job without limit
# (all in seconds).
RETRY_INITIAL_DELAY_SECONDS = 0.5
RETRY_MAX_DELAY_SECONDS = 10.0
REATTACH_MIN_WINDOW_SECONDS = 10.0
REATTACH_UNLIMITED_WINDOW_SECONDS = 60.0
# stdin given as bytes up to this size goes whole in the request (Dispatch,
# which every worker serves); more is streamed (DispatchStream).
WHOLE_STDIN_BYTES = 1 << 20
# ListJobs' pages (src/rpc/job_calls.h's kDefaultJobsPageSize,
# kMaxJobsPageSize): page_size 0 asks for the default.
DEFAULT_JOBS_PAGE_SIZE = 100
MAX_JOBS_PAGE_SIZE = 1000
# Keepalive (limits.h's kClientKeepaliveTime, kClientKeepaliveTimeout).
KEEPALIVE_TIME_SECONDS = 30.0
KEEPALIVE_TIMEOUT_SECONDS = 10.0
_SERVING = 1  # grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING

# Channel options unless the caller gives its own: the message limit;
# keepalive pings a worker accepts (it allows one every >= 5 s, with or
# without calls), so that a job silent for hours keeps its connection
# through NATs and load balancers that drop idle flows, and a dead
# connection is noticed (README, "Time and keepalive"); and no transparent
# retries: with them, grpcio 1.51 leaves a call sent to a worker as it
# retires waiting past its deadline for good, cancel() or not (about one
# dispatch in 40 aimed at the moment, none in 100 without them;
# tests/test_retirement.py). A call such a retry would have saved fails
# UNAVAILABLE instead: TransientRpcError, nothing started, retry.
DEFAULT_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.enable_retries", 0),
    ("grpc.keepalive_time_ms", int(KEEPALIVE_TIME_SECONDS * 1000)),
    ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_SECONDS * 1000)),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


def channel_options(options: Sequence[Tuple[str, Any]]) -> List[Tuple[str,
                                                                      Any]]:
    """The default channel options, overridden by the caller's."""
    given = {key for key, _ in options}
    return [option for option in DEFAULT_OPTIONS
            if option[0] not in given] + list(options)


@dataclasses.dataclass(frozen=True)
class StopSummary:
    """What a stop's drain did: jobs that finished within the grace, and
    jobs cancelled."""

    drained: int
    cancelled: int


class Offsets(NamedTuple):
    """Byte offsets (or counts) in a job's stdout and stderr."""

    stdout: int = 0
    stderr: int = 0


@dataclasses.dataclass(frozen=True)
class Accepted:
    """The worker admitted the job; it is running."""


@dataclasses.dataclass(frozen=True)
class Attached:
    """This call attached to a job that existed (attach, or dispatch with
    attach_if_exists), to follow it (or, attach with take_over, to control
    it): `ended` if its end follows the output retained;
    `offsets` where the output sent next starts; `lost` the bytes from the
    offsets asked for that this call will not get (no longer kept,
    dropped, or discarded at a cancel)."""

    ended: bool
    offsets: Offsets
    lost: Offsets


@dataclasses.dataclass(frozen=True)
class Output:
    """A chunk of the job's output, byte-exact: stream is "stdout" or
    "stderr"; offset is the position of data's first byte in its stream
    (attach from offset + len(data) to read on from there). `lost`: bytes
    of this stream just before `offset` that this call will not get (since
    its previous chunk of the stream, or since Attached's offset): a
    follower that fell behind the job's output buffer, or output dropped
    (drop_oldest); 0 when the chunk follows the one before without a
    gap."""

    stream: str
    data: bytes
    offset: int = 0
    lost: int = 0


@dataclasses.dataclass(frozen=True)
class InputClosed:
    """Streamed stdin only: the job's stdin closed before the input ended
    (the job closed it, exited or was cancelled); the client stopped
    reading its source."""


@dataclasses.dataclass(frozen=True)
class Exit:
    """The job's program ended: with an exit code, or killed by a signal."""

    code: Optional[int] = None
    signal: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Failure:
    """The job ended without an exit status: reason is "START_FAILED",
    "CANCELLED", "TIME_LIMIT_EXCEEDED" or "HANDLER_ERROR", or
    "UNKNOWN_REASON_<n>" for a reason a newer worker gave that this client
    does not know."""

    reason: str
    message: str


Event = Union[Accepted, Attached, Output, InputClosed, Exit, Failure]
Outcome = Union[Exit, Failure]


@dataclasses.dataclass(frozen=True)
class JobResult:
    """A job's end and everything it wrote that this client read. Exactly
    one of exit_code, signal and failure is set. `lost`: output bytes of
    each stream this client did not get (the worker no longer had them
    when it attached, or it fell behind the job's buffer as a follower, or
    the job dropped output); 0 unless the job ran detached past its
    buffer, outran a follower, or dropped output."""

    exit_code: Optional[int]
    signal: Optional[int]
    failure: Optional[Failure]
    stdout: bytes
    stderr: bytes
    job_id: str = ""
    lost: Offsets = Offsets()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclasses.dataclass(frozen=True)
class JobInfo:
    """One job a worker runs or retains (ListJobs). `client` is who
    dispatched it (a certificate's SAN, "plaintext" or "unix socket");
    `program` its argv[0], never its arguments or environment; `attached`
    whether any call reads it now, and `readers` how many (its controller
    and its followers); `written` the bytes written to each stream;
    `outcome` its end, once it ended."""

    job_id: str
    kind: str
    running: bool
    client: str
    program: str
    started_unix_seconds: float
    running_seconds: float
    attached: bool
    retained_bytes: int
    dropped_bytes: int
    written: Offsets
    detach_grace_seconds: float
    outcome: Optional[Outcome]
    readers: int = 0


@dataclasses.dataclass(frozen=True)
class JobsPage:
    """One page of the jobs a worker runs or retains (jobs_page()), oldest
    first: `jobs`, those of the page this caller may see;
    `next_page_token`, to pass as page_token for the next page ("" on the
    last); `others_running` and `others_ended`, the jobs of other
    identities this caller may not see (under mutual TLS; 0 otherwise),
    on the whole worker, not per page."""

    jobs: List[JobInfo]
    next_page_token: str
    others_running: int = 0
    others_ended: int = 0


@dataclasses.dataclass(frozen=True)
class WorkerStatus:
    """A worker's state (status()), as worker.proto's StatusReply says:
    its `version`, `uptime_seconds`, `idle_seconds` (0 while busy), the
    jobs in flight (`job_ids`, this caller's own, at most 100; the
    others only counted), `jobs_retained`, whether it is `draining`,
    when it retires if nothing changes (`retires_at_unix_seconds`, by
    `retirement_rule`, "idle" or "max_lifetime"; 0 and "" for neither),
    `scale_in_protected`, and the `identity` it serves as."""

    version: str
    uptime_seconds: float
    idle_seconds: float
    jobs_in_flight: int
    max_concurrent_jobs: int
    job_ids: List[str]
    other_jobs_in_flight: int
    jobs_retained: int
    draining: bool
    retires_at_unix_seconds: float
    retirement_rule: str
    scale_in_protected: bool
    identity: str


def read_status(reply: Any) -> WorkerStatus:
    """A StatusReply, read."""
    return WorkerStatus(
        version=reply.version, uptime_seconds=reply.uptime_seconds,
        idle_seconds=reply.idle_seconds, jobs_in_flight=reply.jobs_in_flight,
        max_concurrent_jobs=reply.max_concurrent_jobs,
        job_ids=list(reply.job_ids),
        other_jobs_in_flight=reply.other_jobs_in_flight,
        jobs_retained=reply.jobs_retained, draining=reply.draining,
        retires_at_unix_seconds=reply.retires_at_unix_seconds,
        retirement_rule=reply.retirement_rule,
        scale_in_protected=reply.scale_in_protected,
        identity=reply.identity)


@dataclasses.dataclass(frozen=True)
class Submitted:
    """A job submit() left running on the worker: its `job_id`, and the
    `offsets` to attach from (attach(job_id, offsets)) to read its whole
    output and its end: the start of each stream. `existed`: with
    attach_if_exists, a job of that id was there already (running or
    retained) and nothing new started."""

    job_id: str
    offsets: Offsets = Offsets()
    existed: bool = False


def positive(name: str, value: Optional[float]) -> Optional[float]:
    """A positive finite number of seconds as a float, or None; ValueError
    otherwise."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or not value > 0 or \
            math.isinf(value):
        raise ValueError(f"{name} must be a positive number of seconds, "
                         f"not {value!r}")
    return float(value)


def grace_seconds(name: str, value: float) -> float:
    """A grace in seconds (any number but NaN; < 0: without limit)."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number of seconds, not {value!r}")
    return float(value)


def stop_request(grace: float, timeout: Optional[float],
                 if_idle_for: Optional[float]) -> "tuple[Any, float]":
    """The StopRequest and the call's timeout (default: the grace and a
    minute more, a day without limit)."""
    grace = grace_seconds("grace", grace)
    request = worker_pb2.StopRequest(grace_seconds=grace)
    if if_idle_for is not None:
        if not isinstance(if_idle_for, (int, float)) or \
                not if_idle_for >= 0 or math.isinf(if_idle_for):
            raise ValueError("if_idle_for must be a number of seconds >= 0, "
                             f"not {if_idle_for!r}")
        request.if_idle_for_seconds = float(if_idle_for)
    if timeout is None:
        timeout = 86400.0 if grace < 0 else grace + 60.0
    checked = positive("timeout", timeout)
    assert checked is not None
    return request, checked


def cancel_request(job_id: str, grace: float) -> Any:
    grace = grace_seconds("grace", grace)
    if grace < 0:
        raise ValueError(f"grace must be >= 0 seconds, not {grace!r}")
    return worker_pb2.CancelRequest(job_id=job_id, grace_seconds=grace)


def attach_request(job_id: str, offsets: Optional[Offsets],
                   take_over: bool = False) -> Any:
    """The AttachRequest: from `offsets` (default the start), following
    the job, or, with `take_over`, taking it over; ValueError for an empty
    id."""
    if not job_id:
        raise ValueError("job_id is empty")
    stdout, stderr = offsets or Offsets()
    return worker_pb2.AttachRequest(job_id=job_id, stdout_offset=stdout,
                                    stderr_offset=stderr,
                                    take_over=bool(take_over))


def jobs_request(page_size: int, page_token: str) -> Any:
    """The ListJobsRequest of one page: `page_size` jobs (0: the worker's
    default, DEFAULT_JOBS_PAGE_SIZE; at most MAX_JOBS_PAGE_SIZE) after
    `page_token` ("": from the first). ValueError for a size out of range,
    TypeError for a token that is not a str."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or \
            not 0 <= page_size <= MAX_JOBS_PAGE_SIZE:
        raise ValueError(f"page_size must be an int from 0 to "
                         f"{MAX_JOBS_PAGE_SIZE}, not {page_size!r}")
    if not isinstance(page_token, str):
        raise TypeError("page_token is a str (a reply's next_page_token)")
    return worker_pb2.ListJobsRequest(page_size=page_size,
                                      page_token=page_token)


def read_jobs_page(reply: Any) -> JobsPage:
    """A ListJobsReply, read."""
    return JobsPage([job_info(job) for job in reply.jobs],
                    reply.next_page_token, reply.others_running,
                    reply.others_ended)


# stdin= of dispatch and events: bytes, a binary file object, an iterable of
# bytes, an os file descriptor, or (asyncio only) an async iterable of bytes.
StdinSource = Union[bytes, bytearray, memoryview, int, BinaryIO,
                    Iterable[bytes], AsyncIterable[bytes]]


def dispatch_request(argv: Sequence[str], env: Optional[Dict[str, str]],
                     cwd: str, stdin: bytes, time_limit: Optional[float],
                     job_id: Optional[str], payload: bytes, kind: str,
                     detach_grace: float, attach_if_exists: bool,
                     drop_oldest: bool) -> Any:
    """The DispatchRequest, with a fresh "py-UUID" job id if none is given;
    ValueError for a bad number, RpcError (no call made) for a request over
    the worker's message limit."""
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv is a sequence of strings, not one string")
    spec = worker_pb2.ExecSpec(argv=list(argv), env=dict(env or {}), cwd=cwd,
                               stdin=bytes(stdin))
    if time_limit is not None:
        spec.time_limit_seconds = positive("time_limit", time_limit)
    overflow = (worker_pb2.DispatchRequest.OUTPUT_OVERFLOW_DROP_OLDEST
                if drop_oldest else
                worker_pb2.DispatchRequest.OUTPUT_OVERFLOW_PAUSE)
    request = worker_pb2.DispatchRequest(
        job_id=job_id or f"py-{uuid.uuid4()}", kind=kind, exec=spec,
        payload=bytes(payload),
        detach_grace_seconds=grace_seconds("detach_grace", detach_grace),
        attach_if_exists=attach_if_exists, output_overflow=overflow)
    check_size(request)
    return request


def check_size(request: Any) -> None:
    """RpcError, without a call, for a request over the worker's message
    limit: gRPC's own RESOURCE_EXHAUSTED would read like "retry later"."""
    size = request.ByteSize()
    if size > MAX_MESSAGE_BYTES:
        raise errors.RpcError(
            f"the request is {size} bytes, more than the limit of "
            f"{MAX_MESSAGE_BYTES} bytes (stdin in the request counts; give "
            "a file, an fd or an iterable to stream it instead)")


def submit_request(argv: Sequence[str], env: Optional[Dict[str, str]],
                   cwd: str, stdin: Optional[bytes],
                   time_limit: Optional[float], job_id: Optional[str],
                   payload: bytes, kind: str, detach_grace: float,
                   attach_if_exists: bool, drop_oldest: bool) -> Any:
    """The DispatchRequest of a submit(): as dispatch_request, its stdin
    whole in it. TypeError for stdin that is not bytes (a stream needs a
    call that stays open), ValueError for a detach grace of 0 (the job
    would be cancelled as the call closes)."""
    if stdin is not None and not isinstance(stdin, (bytes, bytearray,
                                                    memoryview)):
        raise TypeError("submit() takes stdin as bytes, whole in the "
                        "request; to stream it, use dispatch() or events()")
    if grace_seconds("detach_grace", detach_grace) == 0:
        raise ValueError("detach_grace must not be 0 for submit(): the job "
                         "would be cancelled as the call closes (< 0: "
                         "without limit)")
    return dispatch_request(argv, env, cwd, stdin or b"", time_limit, job_id,
                            payload, kind, detach_grace, attach_if_exists,
                            drop_oldest)


def job_request(argv: Sequence[str], env: Optional[Dict[str, str]], cwd: str,
                stdin: Optional[StdinSource], time_limit: Optional[float],
                job_id: Optional[str], payload: bytes, kind: str,
                detach_grace: float, attach_if_exists: bool,
                drop_oldest: bool) -> "tuple[Any, Optional[StdinSource]]":
    """The DispatchRequest and the stdin source to stream (None: stdin, if
    any, is whole in the request)."""
    whole, source = split_stdin(stdin)
    return dispatch_request(argv, env, cwd, whole, time_limit, job_id,
                            payload, kind, detach_grace, attach_if_exists,
                            drop_oldest), source


def input_request(request: Any) -> Any:
    """The first message of a DispatchStream call: the request."""
    return worker_pb2.DispatchInput(request=request)


def input_chunk(data: bytes) -> Any:
    """A DispatchStream message of stdin bytes."""
    return worker_pb2.DispatchInput(stdin=data)


def end_of_input() -> Any:
    """The DispatchStream message that ends the input (EOF to the job)."""
    return worker_pb2.DispatchInput(end_of_input=worker_pb2.EndOfInput())


def split_stdin(stdin: Optional[StdinSource]) -> "tuple[bytes, Any]":
    """(bytes for the request, the source to stream or None): small bytes
    go whole in the request, anything else is streamed."""
    if stdin is None:
        return b"", None
    if isinstance(stdin, str):
        raise TypeError("stdin is bytes, a binary file, an fd or an "
                        "iterable of bytes, not str")
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        if len(stdin) <= WHOLE_STDIN_BYTES:
            return bytes(stdin), None
        return b"", memoryview(stdin).cast("B")
    return b"", stdin


def chunks_of(data: Union[bytes, memoryview]) -> Iterator[bytes]:
    """Splits data into chunks of at most STDIN_CHUNK_BYTES."""
    view = memoryview(data).cast("B")
    for at in range(0, len(view), STDIN_CHUNK_BYTES):
        yield bytes(view[at:at + STDIN_CHUNK_BYTES])


def read_fd(fd: int, stopped: Callable[[], bool]) -> Optional[bytes]:
    """The next chunk of a file descriptor (b"" at its end), or None once
    `stopped()`: waits in steps of 0.1 s, so that a pipe that never ends
    does not hold a reading thread long past its call. A chunk is what the
    descriptor has at once, up to STDIN_CHUNK_BYTES, as the C++ client
    reads: a fast producer's input goes in few large messages (a pipe
    gives 64 KiB a read), a trickle's at once. Does not own fd."""
    while not stopped():
        try:
            ready, _, _ = select.select([fd], [], [], 0.1)
        except InterruptedError:
            continue
        if not ready:
            continue
        parts: List[bytes] = []
        got = 0
        while got < STDIN_CHUNK_BYTES:
            try:
                data = os.read(fd, STDIN_CHUNK_BYTES - got)
            except BlockingIOError:
                break  # a non-blocking descriptor with nothing more now
            except InterruptedError:
                continue
            if not data:
                if not parts:
                    return b""  # the end
                break  # the end comes with the next read
            parts.append(data)
            got += len(data)
            if not select.select([fd], [], [], 0)[0]:
                break
        if parts:
            return b"".join(parts)
    return None


def read_all(source: Any) -> bytes:
    """A whole stdin source, for a worker without DispatchStream."""
    if isinstance(source, int):
        parts: List[bytes] = []
        while True:
            data = read_fd(source, lambda: False)
            if not data:
                return b"".join(parts)
            parts.append(data)
    return b"".join(read_blocking(source))


def read_blocking(source: Any) -> Iterator[bytes]:
    """The chunks of a sync stdin source (not an fd): bytes in memory, a
    binary file object, or an iterable of bytes. TypeError for anything
    else."""
    if isinstance(source, memoryview):
        yield from chunks_of(source)
    elif hasattr(source, "read"):
        read = getattr(source, "read1", None) or source.read
        while True:
            data = read(STDIN_CHUNK_BYTES)
            if not data:
                return
            if not isinstance(data, (bytes, bytearray)):
                raise TypeError("stdin must be opened in binary mode")
            yield bytes(data)
    elif isinstance(source, Iterable):
        for data in source:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"stdin yielded {type(data).__name__}, "
                                "not bytes")
            yield from chunks_of(data)
    else:
        raise TypeError(f"stdin cannot be {type(source).__name__}")


def serving(reply: bytes) -> bool:
    """Reads HealthCheckResponse.status (field 1, a varint) from its
    bytes."""
    i, status = 0, 0
    while i < len(reply):
        tag = reply[i]
        i += 1
        value, shift = 0, 0
        while i < len(reply):
            byte = reply[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if tag == 0x08:
            status = value
        elif tag & 0x07 != 0:
            break  # nothing else is a varint here; stop reading
    return status == _SERVING


def outcome_of(exit: Any, failure: Any) -> Optional[Outcome]:
    """The job's end from a proto Exit or Failure (None if neither is
    given). An Exit with neither code nor signal is a protocol error
    (ValueError), never code 0; a reason this client does not know is kept
    as "UNKNOWN_REASON_<n>"."""
    if exit is not None:
        status = exit.WhichOneof("status")
        if status == "code":
            return Exit(code=exit.code)
        if status == "signal":
            return Exit(signal=exit.signal)
        raise ValueError("an exit with neither code nor signal")
    if failure is not None:
        try:
            reason = worker_pb2.Failure.Reason.Name(failure.reason)
        except ValueError:
            reason = f"UNKNOWN_REASON_{failure.reason}"
        return Failure(reason, failure.message)
    return None


def job_info(info: Any) -> JobInfo:
    which = info.WhichOneof("outcome")
    try:
        outcome = outcome_of(info.exit if which == "exit" else None,
                             info.failure if which == "failure" else None)
    except ValueError:
        outcome = None
    return JobInfo(
        job_id=info.job_id, kind=info.kind,
        running=info.state != worker_pb2.JobInfo.ENDED, client=info.client,
        program=info.program, started_unix_seconds=info.started_unix_seconds,
        running_seconds=info.running_seconds, attached=info.attached,
        retained_bytes=info.retained_bytes, dropped_bytes=info.dropped_bytes,
        written=Offsets(info.stdout_bytes, info.stderr_bytes),
        detach_grace_seconds=info.detach_grace_seconds, outcome=outcome,
        readers=info.readers)


def cancel_outcome(reply: Any) -> Outcome:
    which = reply.WhichOneof("outcome")
    try:
        outcome = outcome_of(reply.exit if which == "exit" else None,
                             reply.failure if which == "failure" else None)
    except ValueError as e:
        raise errors.RpcError(f"protocol error: the cancel reply has {e}")
    if outcome is None:
        raise errors.RpcError("protocol error: the cancel reply has no "
                              "outcome")
    return outcome


class JobReader:
    """Reads one job's events, over one call or several (dispatch, then
    attach after a lost stream): the offsets reached in each stream, the
    output gathered (if `gather`), bytes lost, and the end. Not
    thread-safe; one per job."""

    def __init__(self, job_id: str, gather: bool = True) -> None:
        self.job_id = job_id
        self.offsets = Offsets()
        self.lost = Offsets()
        self.outcome: Optional[Outcome] = None
        self.started = False  # accepted or attached, in any call
        self.call_started = False  # accepted or attached, in this call
        self._gather = gather
        self._out: List[bytes] = []
        self._err: List[bytes] = []

    def begin_call(self) -> None:
        """A new call starts: its events are read from here."""
        self.call_started = False

    def take(self, message: Any) -> Optional[Event]:
        """The Event of a DispatchEvent (None for one this client does not
        know: a newer worker's). Raises WorkerError for a protocol error:
        nothing on the wire failed (code None), but what came cannot be
        read, and reading it again would not help."""
        which = message.WhichOneof("event")
        if which == "accepted":
            self.started = self.call_started = True
            return Accepted()
        if which == "attached":
            a = message.attached
            self.started = self.call_started = True
            # Output resumes where the worker says; what it skipped is lost.
            self.lost = Offsets(
                self.lost.stdout + a.stdout_lost_bytes,
                self.lost.stderr + a.stderr_lost_bytes)
            self.offsets = Offsets(a.stdout_offset, a.stderr_offset)
            return Attached(a.ended, Offsets(a.stdout_offset,
                                             a.stderr_offset),
                            Offsets(a.stdout_lost_bytes,
                                    a.stderr_lost_bytes))
        if which == "output":
            o = message.output
            stderr = o.stream == worker_pb2.Output.STDERR
            end = o.offset + len(o.data)
            if stderr:
                self.offsets = self.offsets._replace(stderr=end)
                self.lost = self.lost._replace(
                    stderr=self.lost.stderr + o.lost_bytes)
            else:
                self.offsets = self.offsets._replace(stdout=end)
                self.lost = self.lost._replace(
                    stdout=self.lost.stdout + o.lost_bytes)
            if self._gather:
                (self._err if stderr else self._out).append(o.data)
            return Output("stderr" if stderr else "stdout", o.data, o.offset,
                          o.lost_bytes)
        if which == "input_closed":
            return InputClosed()
        if which in ("exit", "failure"):
            try:
                self.outcome = outcome_of(
                    message.exit if which == "exit" else None,
                    message.failure if which == "failure" else None)
            except ValueError as e:
                raise self.protocol_error(str(e)) from None
            return self.outcome
        return None

    def protocol_error(self, what: str) -> errors.WorkerError:
        """What the worker sent cannot be read: before the job started,
        nothing ran (RpcError); after, its outcome is unknown."""
        cls = errors.OutcomeUnknown if self.call_started else errors.RpcError
        return cls(f"protocol error: {what}")

    def no_end(self) -> errors.WorkerError:
        """The call closed with OK but without the job's end."""
        cls = errors.OutcomeUnknown if self.call_started else errors.RpcError
        return cls("the worker closed the stream without the job's end",
                   grpc.StatusCode.DATA_LOSS)

    def result(self) -> JobResult:
        outcome = self.outcome
        assert outcome is not None
        out, err = b"".join(self._out), b"".join(self._err)
        if isinstance(outcome, Exit):
            return JobResult(outcome.code, outcome.signal, None, out, err,
                             self.job_id, self.lost)
        return JobResult(None, None, outcome, out, err, self.job_id,
                         self.lost)


def reattach_window(detach_grace: float) -> float:
    """How long after a lost stream dispatch tries to attach again, as the
    CLI: the job's detach grace (it is cancelled after it, its result kept
    to be read), at least REATTACH_MIN_WINDOW_SECONDS, and
    REATTACH_UNLIMITED_WINDOW_SECONDS for a job without limit."""
    if detach_grace < 0:
        return REATTACH_UNLIMITED_WINDOW_SECONDS
    return max(detach_grace, REATTACH_MIN_WINDOW_SECONDS)


def worth_attaching(error: errors.WorkerError, rpc: str) -> bool:
    """Whether a failed dispatch (or attach after it) may get the job by
    attaching again: the stream was lost after the job started (not a
    protocol error; never TakenOver: another call has the job, and
    attaching back would only follow it behind that call's back), or an
    attach found the worker unreachable for now."""
    if isinstance(error, errors.TakenOver):
        return False
    if isinstance(error, errors.OutcomeUnknown):
        return error.code is not None and \
            error.code != grpc.StatusCode.ABORTED
    return rpc == "attach" and isinstance(error, errors.TransientRpcError)


class Reattach:
    """When dispatch attaches again to its job after a failed call, as the
    CLI's dispatch: after a lost stream (worth_attaching), with a backoff
    (RETRY_INITIAL_DELAY_SECONDS doubling up to RETRY_MAX_DELAY_SECONDS),
    for the reattach_window from each loss, and never past the call's own
    `timeout` (seconds, from now). A dispatch lost before its Accepted came
    (errors.may_have_been_accepted) is attached to, to see whether it
    started (again while that attach is itself lost on the way): if it
    finds no job (or no worker), the dispatch's own error stands. Once the
    job started, running out of attaches is OutcomeUnknown, not a transient
    error. TakenOver (another call took the job over: attach's take_over)
    ends the dispatch at once: the job runs on under that call, which gets
    its end. Each attach follows the job (no take_over), so it disturbs no
    other call reading it."""

    def __init__(self, detach_grace: float, timeout: Optional[float],
                 enabled: bool = True) -> None:
        self._deadline = (None if timeout is None
                          else time.monotonic() + timeout)
        self._window = reattach_window(detach_grace)
        self._give_up = 0.0
        self._delay = RETRY_INITIAL_DELAY_SECONDS
        self._enabled = enabled
        self._unanswered: Optional[errors.WorkerError] = None
        self.rpc = "dispatch"  # the call that failed last

    def delay_after(self, error: errors.WorkerError) -> float:
        """Seconds to wait before attaching again after `error`, or raises
        the error that ends the dispatch."""
        if not self._enabled or isinstance(error, errors.TakenOver):
            raise error
        before_attached = not isinstance(
            error, (errors.OutcomeUnknown, errors.AcceptedDeadlineExceeded))
        probe_lost = (self._unanswered is not None and before_attached and
                      isinstance(error, errors.TransientRpcError) and
                      errors.lost_on_the_way(error))
        if self._unanswered is not None and before_attached and \
                not probe_lost:
            raise self._unanswered from None
        first_loss = errors.may_have_been_accepted(error, self.rpc)
        if not first_loss and not probe_lost:
            self._unanswered = None
            if not worth_attaching(error, self.rpc):
                raise self._final(error)
        now = time.monotonic()
        if first_loss:
            self._unanswered = error
        if first_loss or isinstance(error, errors.OutcomeUnknown):
            # Each loss starts the window and the schedule again.
            self._give_up = now + self._window
            if self._deadline is not None:
                self._give_up = min(self._give_up, self._deadline)
            self._delay = RETRY_INITIAL_DELAY_SECONDS
        delay, self._delay = self._delay, min(self._delay * 2,
                                          RETRY_MAX_DELAY_SECONDS)
        if now + delay >= self._give_up:
            raise self._final(error)
        self.rpc = "attach"
        return delay

    def _final(self, error: errors.WorkerError) -> errors.WorkerError:
        """`error`, or, for a transient failure of an attach (the job had
        started, or may have), OutcomeUnknown: not "nothing started"."""
        if self.rpc == "attach" and isinstance(error,
                                               errors.TransientRpcError):
            return errors.OutcomeUnknown(error.details, error.code)
        return error

    def timeout(self) -> Optional[float]:
        """What is left of the call's timeout, for the next attach."""
        if self._deadline is None:
            return None
        return max(self._deadline - time.monotonic(), 0.001)
