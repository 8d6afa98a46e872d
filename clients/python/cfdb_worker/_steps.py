"""What an operation of cfdb_worker._core yields to the driver that runs it,
and how an operation becomes a method of both drivers (WorkerConnection on
a grpc channel, AsyncWorkerConnection on a grpc.aio one). An operation is a
generator of steps: it yields a step, gets its reply back (or has the
call's grpc.RpcError, or InputFailed, raised where it yielded), and returns
its value; it makes no call, and knows no thread or event loop. _core.idle
is one, and `idle = sync_op(idle)` in _core.SyncOperations makes it
WorkerConnection.idle. A driver provides _open (a stream's handle) and _go
(the loop that does a Run's steps); the rest is here, once.
"""
import dataclasses
import inspect
import typing
from typing import (TYPE_CHECKING, Any, AsyncIterator, Callable, Coroutine,
                    Generator, Generic, Iterator, List, Optional, Sequence,
                    Tuple, TypeVar, Union)

from cfdb_worker import errors
from cfdb_worker._common import Event, StdinSource, channel_options
from cfdb_worker._rpcs import RPCS
from cfdb_worker._wire import worker_pb2_grpc
from cfdb_worker.credentials import Credentials

if TYPE_CHECKING:  # typing has them from Python 3.10; pyproject says 3.9
    from typing import Concatenate, ParamSpec
    P = ParamSpec("P")

R = TypeVar("R")
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


@dataclasses.dataclass(frozen=True)
class Unary:
    """A unary call of `method` (a Worker method's name, or "Health", the
    health check, whose request and reply are bytes); replies with the
    reply."""

    method: str
    request: Any
    timeout: Optional[float]


@dataclasses.dataclass(frozen=True)
class Stream:
    """Opens a server-streaming call of `method` with `request`, or, with
    `stdin`, a bidi one: `request` first, then, once Input(go=True) says
    so, stdin's chunks as gRPC's flow control takes them, and
    end_of_input. Replies with the driver's handle of the stream, which
    the driver ends (its input stopped, the call cancelled) when it ends or
    fails, and when the operation is over."""

    method: str
    request: Any
    timeout: Optional[float]
    stdin: Optional[StdinSource] = None


@dataclasses.dataclass(frozen=True)
class Next:
    """Replies with the stream's next message; None once it closed with
    OK."""

    stream: Any


@dataclasses.dataclass(frozen=True)
class Input:
    """Starts (go) or stops reading the stream's stdin; nothing for a
    stream without."""

    stream: Any
    go: bool


@dataclasses.dataclass(frozen=True)
class ReadAll:
    """Replies with a whole stdin source, read."""

    source: StdinSource


@dataclasses.dataclass(frozen=True)
class Sleep:
    """Waits that long: time.sleep, or asyncio.sleep on the loop."""

    seconds: float


@dataclasses.dataclass(frozen=True)
class Emit:
    """An event for the caller of events() or attach_events(); the other
    operations' drivers drop it."""

    event: Event


Step = Union[Unary, Stream, Next, Input, ReadAll, Sleep, Emit]
Steps = Generator[Step, Any, R]


class InputFailed(Exception):
    """Raised into an operation at its Next by the driver when reading the
    stream's stdin failed with `error` (the driver cancelled the call for
    it, so the call's own error says nothing)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error

    def failure(self) -> BaseException:
        """What to raise: a wrong source as it is, an I/O error as the
        job's end unknown (the worker cancels the job of a cut-short
        input)."""
        if isinstance(self.error, OSError):
            return errors.OutcomeUnknown(
                f"reading stdin failed ({self.error}); the job's input was "
                "cut short and the worker cancels it")
        return self.error


class Pumped:
    """The end both drivers' stream handles share: `_call`, and `_pump`
    (the writer of its stdin, or None). input() starts or stops the
    pump as the operation's Input step says; end() stops it and cancels
    the call."""

    _pump: Any = None
    _call: Any = None

    def input(self, go: bool) -> None:
        if self._pump is not None:
            if go:
                self._pump.start()
            else:
                self._pump.stop()

    def end(self) -> None:
        if self._pump is not None:
            self._pump.stop(call_ended=True)
        self._call.cancel()


class Run(Generic[R]):
    """One operation's steps as a driver runs them, started at once (up to
    its first step: bad arguments raise here). `step` is the step to do
    next, None once the operation returned `result`; reply() answers it,
    fail() raises into it. `streams`: the handles of the streams it opened
    (its Stream steps' replies), for the driver to end when the run is
    over. Not thread-safe."""

    def __init__(self, steps: Steps[R]) -> None:
        self._steps = steps
        self.streams: List[Any] = []
        self.step: Optional[Step] = None
        self.result: R
        self._advance(lambda: steps.send(None))

    def reply(self, value: Any = None) -> None:
        if isinstance(self.step, Stream):
            self.streams.append(value)
        self._advance(lambda: self._steps.send(value))

    def fail(self, error: BaseException) -> None:
        self._advance(lambda: self._steps.throw(error))

    def close(self) -> None:
        self._steps.close()

    def _advance(self, to_next: Callable[[], Step]) -> None:
        self.step = None
        try:
            self.step = to_next()
        except StopIteration as done:
            self.result = done.value


class Connection:
    """A channel to one worker (of `_grpc`, the driver's module: grpc or
    grpc.aio) and the methods called on it; see WorkerConnection."""

    _grpc: Any
    _closed = False

    def __init__(self, address: str,
                 credentials: Optional[Credentials] = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        if not address:
            raise ValueError("worker address is empty")
        self.address = address
        merged = channel_options(options)
        if credentials is None or address.startswith("unix:"):
            self._channel = self._grpc.insecure_channel(address, merged)
        else:
            self._channel = self._grpc.secure_channel(
                address, credentials.channel_credentials(),
                merged + credentials.channel_options())
        self._worker = worker_pb2_grpc.WorkerStub(self._channel)
        self._health_check = self._channel.unary_unary(HEALTH_CHECK)

    def _method(self, name: str) -> Any:
        """The multicallable of a Unary's or a Stream's method; ValueError
        once the connection is closed."""
        if self._closed:
            raise ValueError("the connection is closed")
        if name == RPCS["health"].name:
            return self._health_check
        return getattr(self._worker, name)

    def _open(self, step: Stream) -> Any:
        """The driver's handle of a stream it opens for `step`."""
        raise NotImplementedError

    def _start(self, steps: Steps[R], at_once: bool = False) -> Run[R]:
        """A run of `steps`; `at_once`, its first stream opened now, not
        when it is first read."""
        run = Run(steps)
        if at_once and isinstance(run.step, Stream):
            run.reply(self._open(run.step))
        return run


class SyncDriver(Connection):
    def _go(self, run: Run[Any]) -> Iterator[Event]:
        """Does the run's steps, blocking, yielding what it emits; ends its
        streams however it ends."""
        raise NotImplementedError


class AsyncDriver(Connection):
    def _go(self, run: Run[Any]) -> AsyncIterator[Event]:
        """Does the run's steps on the loop, yielding what it emits; ends
        its streams however it ends."""
        raise NotImplementedError


def sync_op(steps: "Callable[P, Steps[R]]"
            ) -> "Callable[Concatenate[SyncDriver, P], R]":
    """An operation as a blocking method returning its value."""
    def op(self: SyncDriver, /, *args: "P.args", **kwargs: "P.kwargs") -> R:
        run = self._start(steps(*args, **kwargs))
        for _ in self._go(run):
            pass
        return run.result
    return _method_of(op, steps)


def async_op(steps: "Callable[P, Steps[R]]") -> (
        "Callable[Concatenate[AsyncDriver, P], Coroutine[Any, Any, R]]"):
    """An operation as a coroutine method returning its value."""
    async def op(self: AsyncDriver, /, *args: "P.args",
                 **kwargs: "P.kwargs") -> R:
        run = self._start(steps(*args, **kwargs))
        async for _ in self._go(run):
            pass
        return run.result
    return _method_of(op, steps)


def sync_events(steps: "Callable[P, Steps[None]]", at_once: bool = False
                ) -> "Callable[Concatenate[SyncDriver, P], Iterator[Event]]":
    """A streaming operation as a method returning an iterator of its
    events (`at_once`: see Connection._start)."""
    def op(self: SyncDriver, /, *args: "P.args",
           **kwargs: "P.kwargs") -> Iterator[Event]:
        return self._go(self._start(steps(*args, **kwargs), at_once))
    return _method_of(op, steps, Iterator[Event])


def async_events(steps: "Callable[P, Steps[None]]", at_once: bool = False
                 ) -> ("Callable[Concatenate[AsyncDriver, P], "
                       "AsyncIterator[Event]]"):
    """A streaming operation as a method returning an async iterator of its
    events (`at_once`: see Connection._start)."""
    def op(self: AsyncDriver, /, *args: "P.args",
           **kwargs: "P.kwargs") -> AsyncIterator[Event]:
        return self._go(self._start(steps(*args, **kwargs), at_once))
    return _method_of(op, steps, AsyncIterator[Event])


F = TypeVar("F", bound=Callable[..., Any])


def _method_of(op: F, steps: Callable[..., Any],
               returns: Any = None) -> F:
    """`op` with the name, docstring and signature (self, then the
    parameters of `steps`, returning what its steps return or `returns`)
    that help() and inspect show."""
    signature = inspect.signature(steps)
    if returns is None:
        returns = typing.get_args(signature.return_annotation)[-1]
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    op.__name__ = op.__qualname__ = steps.__name__
    op.__doc__ = steps.__doc__
    setattr(op, "__signature__", signature.replace(
        parameters=[self, *signature.parameters.values()],
        return_annotation=returns))
    return op
