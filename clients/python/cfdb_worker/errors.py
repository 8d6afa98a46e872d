"""What a caller should make of a failed call, by kind: the same kinds as
the C++ client (include/cfdb/worker/errors.h) and the CLI's exit codes,
checked against one case table (tests/data/error_cases.json).

Every exception is a WorkerError with `.kind` (the kind's name, as the CLI
prints it), `.code` (the grpc.StatusCode, or None) and `.details`.
"""
from typing import Optional, Tuple, Type

import grpc

from cfdb_worker._rpcs import RPCS


class WorkerError(Exception):
    """A failed call to a worker."""

    kind = "rpc error"
    exit_code = 76

    def __init__(self, details: str,
                 code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(f"{self.kind} ({code.name if code else 'no code'}): "
                         f"{details}")
        self.details = details
        self.code = code


class IdleUnavailable(WorkerError):
    """The worker predates the Idle RPC (UNIMPLEMENTED on idle). A missing
    capability, not a fault: never evict a worker for it."""

    kind = "idle unavailable"
    exit_code = 69


class TransientRpcError(WorkerError):
    """Nothing was started: the worker is stopping or gone, the connection
    failed, the docket is full, or (idle, stop, health) no answer came in
    time. Retrying, here later or on another worker, may work. (From
    events(), a call lost on the way may have been accepted all the same;
    dispatch() attaches to find out.)"""

    kind = "transient error"
    exit_code = 75


class HandshakeError(TransientRpcError):
    """A transient error with TLS evidence: a credential mistake to
    diagnose (wrong CA, wrong identity, expired certificate)."""

    kind = "handshake error"


class RpcError(WorkerError):
    """Deterministic: the same call fails again anywhere (invalid request,
    a message over a size limit, unimplemented). Do not retry."""


class PermissionDenied(WorkerError):
    """The worker's admission lists do not let this certificate's identity
    call this method. Nothing ran."""

    kind = "permission denied"
    exit_code = 77


class OutcomeUnknown(WorkerError):
    """dispatch or attach, after the job was accepted (or attached to): the
    stream broke before the job's end. The job started; do not resend it
    blindly: attach to it (dispatch does, by itself, after a lost
    stream)."""

    kind = "accepted, outcome unknown"
    exit_code = 74


class AcceptedDeadlineExceeded(WorkerError):
    """dispatch or attach, after the job was accepted (or attached to): the
    caller's timeout passed and the call ended. The job runs on: a call
    that controlled it (its dispatch, an attach with take_over) leaves it
    to its detach grace (cancelled at once with 0, dispatch's default,
    else it runs on to be attached to, or cancelled: cancel()); a
    follower's end changes nothing for it."""

    kind = "accepted, deadline exceeded"
    exit_code = 73


class MaybeStarted(WorkerError):
    """dispatch: the timeout passed before any answer; the worker may have
    admitted the job. Do not resend it blindly."""

    kind = "no answer before the deadline"
    exit_code = 74


class AlreadyExists(WorkerError):
    """dispatch: a job of that id runs, or its result is retained
    (ALREADY_EXISTS). Nothing new ran: attach to it instead (attach(), or
    dispatch with attach_if_exists=True)."""

    kind = "already exists"
    exit_code = 67


class NotFound(WorkerError):
    """attach, cancel: no job of that id runs or is retained (NOT_FOUND):
    it never ran on that worker, or its result expired."""

    kind = "not found"
    exit_code = 66


class StillBusy(WorkerError):
    """stop with if_idle_for: the worker was busy, not idle that long, or
    holds unread results of detached jobs (FAILED_PRECONDITION). It keeps
    serving; nothing was stopped."""

    kind = "still busy"
    exit_code = 65


class TakenOver(WorkerError):
    """dispatch or attach (ABORTED): another call took the job over
    (attach with take_over). The job runs on under that call; nothing was
    lost, and nothing should be resent."""

    kind = "taken over"
    exit_code = 68


def _mentions(details: Optional[str], words: Tuple[str, ...]) -> bool:
    text = (details or "").lower()
    return any(word in text for word in words)


# errors.cc's evidence words (HasTlsEvidence, HasSizeLimitEvidence,
# HasTransportEvidence), as they are there: test_errors checks.
_TLS_WORDS = ("tls", "ssl", "certificate", "handshake", "verification",
              "unauthenticated")
_SIZE_WORDS = ("larger than max", "exceeds limit", "more than the limit")
_TRANSPORT_WORDS = ("stream removed", "socket closed", "connection",
                    "broken pipe", "goaway", "transport", "end of file",
                    "cancelling all calls", "keepalive")


def classify(rpc: str, error: BaseException,
             accepted: bool = False) -> WorkerError:
    """Returns the WorkerError for a grpc.RpcError of `rpc` (a key of
    _rpcs.RPCS: "idle", "dispatch", ...); `accepted` when a
    dispatch's job was accepted (an attach's `attached` had come) before
    the call failed."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    return kind_of(rpc, code, details, accepted)(details or "", code)


def kind_of(rpc: str, code: Optional[grpc.StatusCode], details: Optional[str],
            accepted: bool = False) -> Type[WorkerError]:
    """The WorkerError subclass for a failed call: classify(), from its
    parts."""
    C = grpc.StatusCode
    row = RPCS[rpc]
    cls: Type[WorkerError]
    if row.follows_job and code == C.ABORTED:
        cls = TakenOver
    elif row.follows_job and accepted:
        cls = (AcceptedDeadlineExceeded if code == C.DEADLINE_EXCEEDED
               else OutcomeUnknown)
    elif code == C.UNAUTHENTICATED or (
            code == C.UNAVAILABLE and _mentions(details, _TLS_WORDS)):
        cls = HandshakeError
    elif _mentions(details, _SIZE_WORDS):
        cls = RpcError
    elif code == C.UNIMPLEMENTED:
        cls = IdleUnavailable if row.capability else RpcError
    elif code == C.DEADLINE_EXCEEDED:
        cls = MaybeStarted if row.may_start_job else TransientRpcError
    elif code in (C.UNAVAILABLE, C.CANCELLED, C.RESOURCE_EXHAUSTED):
        cls = TransientRpcError
    elif code == C.PERMISSION_DENIED:
        cls = PermissionDenied
    elif code == C.ALREADY_EXISTS:
        cls = AlreadyExists
    elif code == C.NOT_FOUND:
        # Health answers NOT_FOUND for a service it does not know.
        cls = NotFound if row.finds_job else RpcError
    elif code == C.FAILED_PRECONDITION:
        cls = StillBusy if row.conditional else RpcError
    elif code in (C.UNKNOWN, C.INTERNAL):
        cls = (TransientRpcError if _mentions(details, _TRANSPORT_WORDS)
               else RpcError)
    else:
        cls = RpcError
    return cls


def lost_on_the_way(error: WorkerError) -> bool:
    """Whether a failed call (UNAVAILABLE, CANCELLED, UNKNOWN, INTERNAL) has
    gRPC's message for a transport that broke under it, as the C++
    LostOnTheWay (include/cfdb/worker/errors.h): not "failed to connect",
    nor "GOAWAY received", whose streams the worker never processed; not
    the worker's own answers ("worker is stopping", a full docket)."""
    C = grpc.StatusCode
    return (error.code in (C.UNAVAILABLE, C.CANCELLED, C.UNKNOWN,
                           C.INTERNAL) and
            _mentions(error.details, _TRANSPORT_WORDS) and
            not _mentions(error.details, ("failed to connect", "goaway")))


def may_have_been_accepted(error: WorkerError, rpc: str) -> bool:
    """Whether a dispatch that failed before its Accepted came may have been
    accepted all the same, as the C++ MayHaveBeenAccepted: a transient
    error lost on the way (lost_on_the_way), possibly with the Accepted on
    its way back. Attaching finds out: NotFound means no job of its id is
    there."""
    return (RPCS[rpc].may_start_job and type(error) is TransientRpcError
            and lost_on_the_way(error))
