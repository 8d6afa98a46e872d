"""What a caller should make of a failed call, by kind: the same kinds as
the C++ client (include/cfdb/worker/errors.h) and the CLI's exit codes.

Every exception is a WorkerError with `.kind` (the kind's name, as the CLI
prints it), `.code` (the grpc.StatusCode, or None) and `.details`.
"""
import grpc


class WorkerError(Exception):
    """A failed call to a worker."""

    kind = "rpc error"
    exit_code = 76

    def __init__(self, details, code=None):
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
    time. Retrying, here later or on another worker, may work."""

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
    """dispatch, after the worker accepted the job: the stream broke before
    the job's end. The job started; do not resend it blindly."""

    kind = "accepted, outcome unknown"
    exit_code = 74


class AcceptedDeadlineExceeded(WorkerError):
    """dispatch, after the worker accepted the job: the caller's timeout
    passed. The worker cancels the job as the call ends."""

    kind = "accepted, deadline exceeded"
    exit_code = 73


class MaybeStarted(WorkerError):
    """dispatch: the timeout passed before any answer; the worker may have
    admitted the job. Do not resend it blindly."""

    kind = "no answer before the deadline"
    exit_code = 74


def _mentions(details, words):
    text = (details or "").lower()
    return any(word in text for word in words)


_TLS_WORDS = ("tls", "ssl", "certificate", "handshake", "verification",
              "unauthenticated")
_SIZE_WORDS = ("larger than max", "exceeds limit", "more than the limit")
_TRANSPORT_WORDS = ("stream removed", "socket closed", "connection",
                    "broken pipe", "goaway", "transport", "end of file",
                    "cancelling all calls")


def classify(rpc, error, accepted=False):
    """Returns the WorkerError for a grpc.RpcError of `rpc` ("idle", "stop",
    "dispatch", "health"); `accepted` when a dispatch's job was accepted
    before the call failed."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    C = grpc.StatusCode
    if rpc == "dispatch" and accepted:
        cls = (AcceptedDeadlineExceeded if code == C.DEADLINE_EXCEEDED
               else OutcomeUnknown)
    elif code == C.UNAUTHENTICATED or (
            code == C.UNAVAILABLE and _mentions(details, _TLS_WORDS)):
        cls = HandshakeError
    elif _mentions(details, _SIZE_WORDS):
        cls = RpcError
    elif code == C.UNIMPLEMENTED:
        cls = IdleUnavailable if rpc == "idle" else RpcError
    elif code == C.DEADLINE_EXCEEDED:
        cls = MaybeStarted if rpc == "dispatch" else TransientRpcError
    elif code in (C.UNAVAILABLE, C.CANCELLED, C.RESOURCE_EXHAUSTED):
        cls = TransientRpcError
    elif code == C.PERMISSION_DENIED:
        cls = PermissionDenied
    elif code in (C.UNKNOWN, C.INTERNAL):
        cls = (TransientRpcError if _mentions(details, _TRANSPORT_WORDS)
               else RpcError)
    else:
        cls = RpcError
    return cls(details, code)
