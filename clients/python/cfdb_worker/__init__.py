"""A client of cfdb-worker: poll a worker's idle time, stop it with a drain
grace, dispatch jobs to it and read its health, over TCP (plaintext or
mutual TLS) or its Unix socket.

    from cfdb_worker import WorkerConnection
    with WorkerConnection("127.0.0.1:50051") as worker:
        if worker.idle() > 300:
            worker.stop(grace=60)
"""
from cfdb_worker.connection import (Accepted, Event, Exit, Failure,
                                    JobResult, Output, StopSummary,
                                    WorkerConnection)
from cfdb_worker.credentials import Credentials
from cfdb_worker.errors import (AcceptedDeadlineExceeded, HandshakeError,
                                IdleUnavailable, MaybeStarted, OutcomeUnknown,
                                PermissionDenied, RpcError, TransientRpcError,
                                WorkerError)

__all__ = [
    "Accepted", "AcceptedDeadlineExceeded", "Credentials", "Event", "Exit",
    "Failure", "HandshakeError", "IdleUnavailable", "JobResult",
    "MaybeStarted", "OutcomeUnknown", "Output", "PermissionDenied",
    "RpcError", "StopSummary", "TransientRpcError", "WorkerConnection",
    "WorkerError",
]
