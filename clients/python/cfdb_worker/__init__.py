"""A client of cfdb-worker: poll a worker's idle time, stop it with a drain
grace (or only if it is still idle), dispatch jobs to it and treat them as
handles (submit and walk away, attach again from offsets to follow or take
over, list, cancel), stream their stdin, and read its health, over TCP
(plaintext or mutual TLS) or its Unix socket.
Blocking here; cfdb_worker.aio has the same surface on asyncio.

    from cfdb_worker import WorkerConnection
    with WorkerConnection("127.0.0.1:50051") as worker:
        if worker.idle() > 300:
            worker.stop(grace=60)
"""
from cfdb_worker._common import (Accepted, Attached, Event, Exit, Failure,
                                 InputClosed, JobInfo, JobResult, JobsPage,
                                 Offsets, Outcome, Output, StopSummary,
                                 Submitted, WorkerStatus)
from cfdb_worker.connection import WorkerConnection
from cfdb_worker.credentials import Credentials
from cfdb_worker.errors import (AcceptedDeadlineExceeded, AlreadyExists,
                                HandshakeError, IdleUnavailable, MaybeStarted,
                                NotFound, OutcomeUnknown, PermissionDenied,
                                RpcError, StillBusy, TakenOver,
                                TransientRpcError, WorkerError)

__all__ = [
    "Accepted", "AcceptedDeadlineExceeded", "AlreadyExists", "Attached",
    "Credentials", "Event", "Exit", "Failure", "HandshakeError",
    "IdleUnavailable", "InputClosed", "JobInfo", "JobResult", "JobsPage",
    "MaybeStarted", "NotFound", "Offsets", "Outcome", "OutcomeUnknown",
    "Output", "PermissionDenied", "RpcError", "StillBusy", "StopSummary",
    "Submitted", "TakenOver", "TransientRpcError", "WorkerConnection",
    "WorkerError", "WorkerStatus",
]
