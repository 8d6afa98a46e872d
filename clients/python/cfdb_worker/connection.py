"""WorkerConnection: one worker's idle, stop, dispatch and health."""
import dataclasses
import math
import uuid
from typing import Dict, Iterator, Optional, Sequence, Union

import grpc

from cfdb_worker import errors
from cfdb_worker._wire import worker_pb2, worker_pb2_grpc

_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_SERVING = 1  # grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING
_MAX_MESSAGE_BYTES = 64 << 20  # the worker's receive limit


@dataclasses.dataclass(frozen=True)
class StopSummary:
    """What a stop's drain did: jobs that finished within the grace, and
    jobs cancelled."""

    drained: int
    cancelled: int


@dataclasses.dataclass(frozen=True)
class Accepted:
    """The worker admitted the job; it is running."""


@dataclasses.dataclass(frozen=True)
class Output:
    """A chunk of the job's output, byte-exact: stream is "stdout" or
    "stderr"."""

    stream: str
    data: bytes


@dataclasses.dataclass(frozen=True)
class Exit:
    """The job's program ended: with an exit code, or killed by a signal."""

    code: Optional[int] = None
    signal: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Failure:
    """The job ended without an exit status: reason is "START_FAILED",
    "CANCELLED", "TIME_LIMIT_EXCEEDED" or "HANDLER_ERROR"."""

    reason: str
    message: str


Event = Union[Accepted, Output, Exit, Failure]


@dataclasses.dataclass(frozen=True)
class JobResult:
    """A dispatched job's end and everything it wrote. Exactly one of
    exit_code, signal and failure is set."""

    exit_code: Optional[int]
    signal: Optional[int]
    failure: Optional[Failure]
    stdout: bytes
    stderr: bytes

    @property
    def ok(self):
        return self.exit_code == 0


def _positive(name, value):
    if value is None:
        return None
    if not isinstance(value, (int, float)) or not value > 0 or \
            math.isinf(value):
        raise ValueError(f"{name} must be a positive number of seconds, "
                         f"not {value!r}")
    return float(value)


def _serving(reply):
    """Reads HealthCheckResponse.status (field 1, a varint) from its bytes."""
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


# Channel options unless the caller gives its own: the message limit, and
# keepalive pings a worker accepts (it allows one every >= 5 s, with or
# without calls), so that a job silent for hours keeps its connection
# through NATs and load balancers that drop idle flows, and a dead
# connection is noticed (README, "Time and keepalive").
_DEFAULT_OPTIONS = (
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30000),
    ("grpc.keepalive_timeout_ms", 10000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


class WorkerConnection:
    """Talks to one worker at `address` ("host:port", or "unix:PATH" for a
    worker's --uds socket, always without TLS). `credentials`
    (cfdb_worker.Credentials) for mutual TLS; None for plaintext. Each call
    blocks until its answer or its timeout and raises a
    cfdb_worker.WorkerError subclass when it fails. Safe to share between
    threads; close() (or a `with` block) releases the channel."""

    def __init__(self, address, credentials=None, options=()):
        if not address:
            raise ValueError("worker address is empty")
        self.address = address
        given = {key for key, _ in options}
        channel_options = [
            option for option in _DEFAULT_OPTIONS if option[0] not in given
        ] + list(options)
        if credentials is None or address.startswith("unix:"):
            self._channel = grpc.insecure_channel(address, channel_options)
        else:
            self._channel = grpc.secure_channel(
                address, credentials.channel_credentials(),
                channel_options + credentials.channel_options())
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)
        self._health = self._channel.unary_unary(_HEALTH_CHECK)

    def idle(self, timeout=5.0) -> float:
        """Seconds since the worker's docket last became empty (startup
        counts as empty); 0.0 while any job runs. ValueError for a timeout
        that is not positive (no call is made); IdleUnavailable when the
        worker predates the Idle RPC."""
        timeout = _positive("timeout", timeout)
        try:
            return self._stub.Idle(worker_pb2.IdleRequest(),
                                   timeout=timeout).seconds
        except grpc.RpcError as e:
            raise errors.classify("idle", e) from None

    def stop(self, grace: float, timeout=None) -> StopSummary:
        """Stops the worker with a drain grace in seconds: 0 cancels the
        jobs in flight now, > 0 lets them run up to that long, < 0 without
        limit. Returns once the drain is over. `timeout` bounds the call
        (default: the grace and a minute more, a day without limit)."""
        if not isinstance(grace, (int, float)) or math.isnan(grace):
            raise ValueError(f"grace must be a number, not {grace!r}")
        if timeout is None:
            timeout = 86400.0 if grace < 0 else grace + 60.0
        timeout = _positive("timeout", timeout)
        try:
            reply = self._stub.Stop(
                worker_pb2.StopRequest(grace_seconds=float(grace)),
                timeout=timeout)
        except grpc.RpcError as e:
            raise errors.classify("stop", e) from None
        return StopSummary(reply.drained, reply.cancelled)

    def events(self, argv: Sequence[str], *, env: Optional[Dict[str, str]] = None,
               cwd: str = "", stdin: bytes = b"",
               time_limit: Optional[float] = None, job_id: Optional[str] = None,
               timeout: Optional[float] = None) -> Iterator[Event]:
        """Runs `argv` (no shell) on the worker with exactly `env` (nothing
        else is inherited), `cwd`, `stdin` and `time_limit` seconds, and
        yields its events: Accepted, Output chunks, then one Exit or
        Failure. `job_id` names the job in the worker's log (default: a
        fresh "py-UUID"). `timeout` bounds the whole call. Errors are raised as the
        iteration reaches them: before Accepted nothing started
        (TransientRpcError means retrying may work); after it,
        OutcomeUnknown or AcceptedDeadlineExceeded: never resend blindly."""
        spec = worker_pb2.ExecSpec(argv=list(argv), env=dict(env or {}),
                                   cwd=cwd, stdin=stdin)
        if time_limit is not None:
            spec.time_limit_seconds = _positive("time_limit", time_limit)
        request = worker_pb2.DispatchRequest(job_id=job_id or
                                             f"py-{uuid.uuid4()}", kind="exec",
                                             exec=spec)
        call = self._stub.Dispatch(request,
                                   timeout=_positive("timeout", timeout))
        accepted = False
        try:
            for event in call:
                which = event.WhichOneof("event")
                if which == "accepted":
                    accepted = True
                    yield Accepted()
                elif which == "output":
                    stream = ("stderr" if event.output.stream ==
                              worker_pb2.Output.STDERR else "stdout")
                    yield Output(stream, event.output.data)
                elif which == "exit":
                    status = event.exit.WhichOneof("status")
                    yield (Exit(signal=event.exit.signal) if status == "signal"
                           else Exit(code=event.exit.code))
                    return
                elif which == "failure":
                    yield Failure(
                        worker_pb2.Failure.Reason.Name(event.failure.reason),
                        event.failure.message)
                    return
        except grpc.RpcError as e:
            raise errors.classify("dispatch", e, accepted) from None
        finally:
            call.cancel()
        raise (errors.OutcomeUnknown if accepted else errors.RpcError)(
            "the stream ended without the job's end")

    def dispatch(self, argv: Sequence[str], **kwargs) -> JobResult:
        """events(), gathered: the job's end and its whole output."""
        out, err = bytearray(), bytearray()
        for event in self.events(argv, **kwargs):
            if isinstance(event, Output):
                (err if event.stream == "stderr" else out).extend(event.data)
            elif isinstance(event, Exit):
                return JobResult(event.code, event.signal, None, bytes(out),
                                 bytes(err))
            elif isinstance(event, Failure):
                return JobResult(None, None, event, bytes(out), bytes(err))
        raise errors.RpcError("no end of the job")  # events() raises first

    def health(self, timeout=5.0) -> bool:
        """True while the worker's gRPC health service says SERVING (it
        turns NOT_SERVING the moment a drain begins)."""
        try:
            reply = self._health(b"", timeout=_positive("timeout", timeout))
        except grpc.RpcError as e:
            raise errors.classify("health", e) from None
        return _serving(reply)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
