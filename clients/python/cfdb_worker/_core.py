"""Each operation of a connection, written once as a generator of steps
(cfdb_worker._steps), and bound to both drivers: SyncOperations are
WorkerConnection's methods, AsyncOperations AsyncWorkerConnection's. A new
unary RPC is a function here, as idle() is, and a line in each class."""
from typing import Any, Dict, List, Optional, Sequence

import grpc

from cfdb_worker import errors
from cfdb_worker._common import (Accepted, Attached, InputClosed, JobInfo,
                                 JobReader, JobResult, JobsPage, Offsets,
                                 Outcome, Reattach, StdinSource, StopSummary,
                                 Submitted, attach_request, cancel_outcome,
                                 cancel_request, check_size, input_request,
                                 job_request, jobs_request, positive,
                                 WorkerStatus, read_jobs_page, read_status,
                                 serving, stop_request, submit_request)
from cfdb_worker._rpcs import RPCS
from cfdb_worker._steps import (AsyncDriver, Emit, Input, InputFailed, Next,
                                ReadAll, Sleep, Steps, Stream, SyncDriver,
                                Unary, async_events, async_op, sync_events,
                                sync_op)
from cfdb_worker._wire import worker_pb2


def unary(rpc: str, request: Any, timeout: Optional[float]) -> Steps[Any]:
    """The reply of a unary call of `rpc` (a key of RPCS), or its error,
    classified."""
    try:
        return (yield Unary(RPCS[rpc].name, request, timeout))
    except grpc.RpcError as e:
        raise errors.classify(rpc, e) from None


def idle(timeout: float = 5.0) -> Steps[float]:
    """Seconds since the worker's docket last became empty (startup
    counts as empty); 0.0 while any job runs. ValueError for a timeout
    that is not positive (no call is made); IdleUnavailable when the
    worker predates the Idle RPC."""
    reply = yield from unary("idle", worker_pb2.IdleRequest(),
                             positive("timeout", timeout))
    return float(reply.seconds)


def status(timeout: float = 5.0) -> Steps[WorkerStatus]:
    """The worker's state (WorkerStatus): idle, jobs in flight, draining,
    when it retires and by which rule, protection, identity, version.
    ValueError for a timeout that is not positive (no call is made);
    RpcError (UNIMPLEMENTED) from a worker that predates the Status RPC."""
    reply = yield from unary("status", worker_pb2.StatusRequest(),
                             positive("timeout", timeout))
    return read_status(reply)


def stop(grace: float, timeout: Optional[float] = None,
         if_idle_for: Optional[float] = None) -> Steps[StopSummary]:
    """Stops the worker with a drain grace in seconds: 0 cancels the
    jobs in flight now, > 0 lets them run up to that long, < 0 without
    limit. Returns once the drain is over. `timeout` bounds the call
    (default: the grace and a minute more, a day without limit).
    With `if_idle_for` (seconds), a conditional stop: the worker stops
    only if its docket has been empty that long and no detached job's
    result is unread, decided atomically with admission; StillBusy
    otherwise, and it keeps serving."""
    request, call_timeout = stop_request(grace, timeout, if_idle_for)
    reply = yield from unary("stop", request, call_timeout)
    return StopSummary(reply.drained, reply.cancelled)


def events(argv: Sequence[str], *,
           env: Optional[Dict[str, str]] = None, cwd: str = "",
           stdin: Optional[StdinSource] = None,
           time_limit: Optional[float] = None,
           job_id: Optional[str] = None, timeout: Optional[float] = None,
           payload: bytes = b"", kind: str = "exec",
           detach_grace: float = 0.0, attach_if_exists: bool = False,
           drop_oldest: bool = False) -> Steps[None]:
    """Runs `argv` (no shell) on the worker with exactly `env` (nothing
    else is inherited), `cwd` and `time_limit` seconds, and yields its
    events over one call: Accepted (or Attached, with
    attach_if_exists, for a job of that id that exists, which this call
    then follows as attach() does), Output chunks with their offsets, at
    most one InputClosed, then one Exit or Failure. Bad arguments raise
    here (ValueError, TypeError).

    `stdin`: bytes (up to 1 MiB go whole in the request), or, streamed
    as the job reads it (DispatchStream), larger bytes, a binary file
    object, an iterable of bytes (asyncio: an async iterable too) or an
    os file descriptor (not closed). A worker without DispatchStream
    gets it whole.
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
    blindly (attach to it: dispatch() does); TakenOver when another call
    took the job over (attach with take_over), which now has its end."""
    # Not a generator itself: the arguments are checked at the call.
    request, source = job_request(argv, env, cwd, stdin, time_limit,
                                  job_id, payload, kind, detach_grace,
                                  attach_if_exists, drop_oldest)
    reader = JobReader(request.job_id, gather=False)
    return job_calls(request, source, reader, positive("timeout", timeout))


def dispatch(argv: Sequence[str], *,
             env: Optional[Dict[str, str]] = None, cwd: str = "",
             stdin: Optional[StdinSource] = None,
             time_limit: Optional[float] = None,
             job_id: Optional[str] = None,
             timeout: Optional[float] = None, payload: bytes = b"",
             kind: str = "exec", detach_grace: float = 0.0,
             attach_if_exists: bool = False, drop_oldest: bool = False,
             reattach: bool = True) -> Steps[JobResult]:
    """events(), gathered: the job's end and its whole output. When the
    stream is lost after the job started (OutcomeUnknown), it attaches
    again from the offsets it got to, following the job (attach() without
    take_over: it disturbs no other call reading it), with a backoff
    (0.5 s doubling to 10 s), for the job's detach grace (at least 10 s, a
    minute without limit) and within `timeout`: the job's own end comes
    back, not the lost stream. A stream lost on the way before Accepted
    came is attached to as well, to see whether the job started:
    TransientRpcError only when no job of its id is there (or no worker
    answers). Without reattach=False, OutcomeUnknown remains only for a
    worker that is really gone, once the job started (or NotFound: one
    that no longer knows the job, e.g. restarted). TakenOver when another
    call took the job over (attach with take_over): never attached to
    again, since that call has the job and gets its end."""
    request, source = job_request(argv, env, cwd, stdin, time_limit,
                                  job_id, payload, kind, detach_grace,
                                  attach_if_exists, drop_oldest)
    call_timeout = positive("timeout", timeout)
    policy = Reattach(request.detach_grace_seconds, call_timeout, reattach)
    reader = JobReader(request.job_id)
    calls = job_calls(request, source, reader, call_timeout)
    while True:
        try:
            yield from calls
            return reader.result()
        except errors.WorkerError as e:
            delay = policy.delay_after(e)
        yield Sleep(delay)
        calls = attach_call(attach_request(request.job_id, reader.offsets),
                            reader, policy.timeout())


def attach_events(job_id: str, offsets: Optional[Offsets] = None,
                  timeout: Optional[float] = None, *,
                  take_over: bool = False) -> Steps[None]:
    """Reads job `job_id`'s events again from byte `offsets` (stdout,
    stderr; default the start of what is kept): Attached, Output from
    there (each with its offset, and Output.lost for bytes skipped),
    live, then its Exit or Failure. Bad arguments raise here
    (ValueError).

    The call follows the job: it only reads, any number of calls may
    follow one job at once, and none disturbs another, nor the call
    that controls the job (its dispatch). A follower that falls behind
    the job's output buffer skips what the buffer no longer holds
    (Output.lost). With `take_over`, on a job that runs, it becomes the
    job's controller instead (its flow control, and, as it leaves, its
    detach grace): the controller before it (the dispatching call, or an
    earlier take-over) ends with TakenOver, and so does this call when
    another takes it over; ignored for a job that has ended.

    NotFound for an unknown or expired id, PermissionDenied for another
    identity's job. A failure after Attached leaves the job running;
    once no call reads it, its detach grace is counted anew."""
    reader = JobReader(job_id, gather=False)
    return attach_call(attach_request(job_id, offsets, take_over), reader,
                       positive("timeout", timeout))


def attach(job_id: str, offsets: Optional[Offsets] = None,
           timeout: Optional[float] = None, *,
           take_over: bool = False) -> Steps[JobResult]:
    """attach_events(), gathered: the job's end and its output from
    `offsets` (JobResult.lost: bytes this call did not get, no longer
    kept or skipped), following the job, or, with `take_over`, taking it
    over (its controller before ends with TakenOver). Raises as
    attach_events()."""
    reader = JobReader(job_id)
    yield from attach_call(attach_request(job_id, offsets, take_over),
                           reader, positive("timeout", timeout))
    return reader.result()


def jobs_page(page_size: int = 0, page_token: str = "",
              timeout: float = 5.0) -> Steps[JobsPage]:
    """One page of the jobs the worker runs or retains that this caller
    may see, oldest first: `page_size` of them (0: the worker's default,
    100; at most 1000) after `page_token` ("": from the first; else a
    page's next_page_token), with the number of other identities' jobs
    it may not see (JobsPage). ValueError for a page size out of range
    (no call is made); RpcError for a token this worker did not give
    (e.g. one of a worker since restarted)."""
    request = jobs_request(page_size, page_token)
    reply = yield from unary("jobs", request, positive("timeout", timeout))
    return read_jobs_page(reply)


def jobs(timeout: float = 5.0) -> Steps[List[JobInfo]]:
    """The jobs the worker runs or retains that this caller may see,
    oldest first: every page of jobs_page(), each call within `timeout`.
    A job that starts while the pages are read may be listed or not;
    none is listed twice. RpcError for a worker whose pages do not move
    on (a protocol error)."""
    listed: List[JobInfo] = []
    token = ""
    while True:
        page = yield from jobs_page(0, token, timeout)
        listed.extend(page.jobs)
        if not page.next_page_token:
            return listed
        if page.next_page_token == token or not page.jobs:
            raise errors.RpcError("protocol error: ListJobs gave the same "
                                  "page again")
        token = page.next_page_token


def submit(argv: Sequence[str], *,
           env: Optional[Dict[str, str]] = None, cwd: str = "",
           stdin: Optional[bytes] = None,
           time_limit: Optional[float] = None,
           job_id: Optional[str] = None, timeout: Optional[float] = None,
           payload: bytes = b"", kind: str = "exec",
           detach_grace: float = -1.0, attach_if_exists: bool = False,
           drop_oldest: bool = False) -> Steps[Submitted]:
    """Dispatches `argv` as dispatch() does and walks away: returns once
    the worker accepted the job (Submitted: its id, and the offsets to
    attach from), then closes the call, which leaves the job running
    with no call attached, for its `detach_grace` (default -1: without
    limit; > 0: that long, then it is cancelled, unless a call attaches
    meanwhile; its time limit and the worker's stop still apply). A
    later attach() (from any connection or process, within the worker's
    result TTL after the job's end) reads its whole output and its end.
    With no call reading it, a job that fills its output buffer is paused
    until one does (or drops its oldest output, with drop_oldest).

    `stdin` is bytes, whole in the request (TypeError for anything else:
    a streamed input needs a call that stays open). ValueError for a
    detach grace of 0 (the job would be cancelled as the call closes)
    and for the bad arguments dispatch() refuses; no call is made. With
    `attach_if_exists`, a job of that id that runs or is retained is
    left as it is (Submitted.existed): resending a submit whose answer
    was lost (TransientRpcError, MaybeStarted) with the same job_id and
    attach_if_exists is safe. `timeout` bounds the call up to the
    acceptance. Errors are dispatch's before Accepted: AlreadyExists,
    TransientRpcError (the docket full, the worker stopping; a call lost
    on the way may have been accepted all the same), MaybeStarted,
    RpcError."""
    request = submit_request(argv, env, cwd, stdin, time_limit, job_id,
                             payload, kind, detach_grace, attach_if_exists,
                             drop_oldest)
    reader = JobReader(request.job_id, gather=False)
    reader.begin_call()
    stream = yield Stream("Dispatch", request, positive("timeout", timeout))
    while True:
        try:
            message = yield Next(stream)
        except grpc.RpcError as e:
            raise errors.classify("dispatch", e) from None
        if message is None:
            raise errors.RpcError("protocol error: the worker closed the "
                                  "Dispatch stream without accepted",
                                  grpc.StatusCode.DATA_LOSS)
        event = reader.take(message)
        if isinstance(event, (Accepted, Attached)):
            # Returning ends the operation, and the driver cancels its
            # call: the job runs on, detached, under its grace.
            return Submitted(request.job_id, Offsets(),
                             existed=isinstance(event, Attached))
        if event is not None:
            raise reader.protocol_error(
                f"the Dispatch stream began with {type(event).__name__}, "
                "not accepted")


def cancel(job_id: str, grace: float,
           timeout: Optional[float] = None) -> Steps[Outcome]:
    """Cancels one job: SIGTERM to its processes, SIGKILL after `grace`
    seconds (0: at once); returns its end (Exit or Failure) once it has
    ended. NotFound for an unknown or expired id. `timeout` bounds the
    call (default: the grace and a minute more)."""
    request = cancel_request(job_id, grace)
    reply = yield from unary("cancel", request, positive(
        "timeout", request.grace_seconds + 60.0
        if timeout is None else timeout))
    return cancel_outcome(reply)


def health(timeout: float = 5.0) -> Steps[bool]:
    """True while the worker's gRPC health service says SERVING (it
    turns NOT_SERVING the moment a drain begins)."""
    reply = yield from unary("health", b"", positive("timeout", timeout))
    return serving(reply)


def job_calls(request: Any, source: Optional[StdinSource],
              reader: JobReader, timeout: Optional[float]) -> Steps[None]:
    """A dispatch's call, its events read into `reader`: DispatchStream
    when stdin is streamed, else Dispatch."""
    reader.begin_call()
    if source is not None:
        stream = yield Stream("DispatchStream", input_request(request),
                              timeout, source)
        try:
            yield from read_job("dispatch", stream, reader)
            return
        except errors.RpcError as e:
            if e.code != grpc.StatusCode.UNIMPLEMENTED or reader.started:
                raise
        # A worker from before DispatchStream: none of the source was read
        # (that starts at acceptance), so it goes whole in the request.
        request.exec.stdin = yield ReadAll(source)
        check_size(request)
    stream = yield Stream("Dispatch", request, timeout)
    yield from read_job("dispatch", stream, reader)


def attach_call(request: Any, reader: JobReader,
                timeout: Optional[float]) -> Steps[None]:
    """An Attach call, its events read into `reader`."""
    reader.begin_call()
    stream = yield Stream("Attach", request, timeout)
    yield from read_job("attach", stream, reader)


def read_job(rpc: str, stream: Any, reader: JobReader) -> Steps[None]:
    """Emits the events of a job's stream until its end; raises its
    failure, classified. The stdin is read once the job is accepted, and
    no more once it is closed (or the call attached to a job that exists:
    it takes no input)."""
    while True:
        try:
            message = yield Next(stream)
        except grpc.RpcError as e:
            raise errors.classify(rpc, e, reader.call_started) from None
        except InputFailed as e:
            raise e.failure() from None
        if message is None:
            raise reader.no_end()
        event = reader.take(message)
        if isinstance(event, Accepted):
            yield Input(stream, go=True)
        elif isinstance(event, (Attached, InputClosed)):
            yield Input(stream, go=False)
        if event is not None:
            yield Emit(event)
        if reader.outcome is not None:
            return


class SyncOperations(SyncDriver):
    """The operations as WorkerConnection's blocking methods (each name is
    the function of that name above, bound)."""

    idle = sync_op(idle)
    status = sync_op(status)
    stop = sync_op(stop)
    events = sync_events(events)
    dispatch = sync_op(dispatch)
    # Its call opens at once, as it always has; events()' at its first read.
    attach_events = sync_events(attach_events, at_once=True)
    attach = sync_op(attach)
    submit = sync_op(submit)
    jobs = sync_op(jobs)
    jobs_page = sync_op(jobs_page)
    cancel = sync_op(cancel)
    health = sync_op(health)


class AsyncOperations(AsyncDriver):
    """The operations as AsyncWorkerConnection's coroutines and async
    iterators."""

    idle = async_op(idle)
    status = async_op(status)
    stop = async_op(stop)
    events = async_events(events)
    dispatch = async_op(dispatch)
    attach_events = async_events(attach_events, at_once=True)
    attach = async_op(attach)
    submit = async_op(submit)
    jobs = async_op(jobs)
    jobs_page = async_op(jobs_page)
    cancel = async_op(cancel)
    health = async_op(health)
