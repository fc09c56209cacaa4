"""
Running a worker's handlers: in the thread pool or on the reactor, and each one's context.

A plain function starts in the thread pool and moves to the reactor while
its calls are short (L{quicx.clients.adaptive.Placement}); C{async def}
handlers, and those registered with C{thread=False}, run on the reactor;
C{thread=True} keeps one in the threads for good.  A handler that takes a
second argument gets the task's L{TaskContext}.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from attrs import frozen
from twisted.internet.defer import ensureDeferred
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from quicx.clients import tracing
from quicx.clients.adaptive import Placement
from quicx.clients.context import TaskContext as TaskContext
from quicx.clients.context import takes_context
from quicx.clients.leases import Lease
from quicx.clients.stuck import StuckWatch
from quicx.protocol import taskflow, wire

Handler = Callable[..., Any]


@frozen
class Registration:
    """
    A handler and where it runs: always in the thread pool (C{in_thread}),
    where its L{Placement} says, or else on the reactor.
    """

    function: Handler
    in_thread: bool
    wants_context: bool = False
    placement: Placement | None = None


Timed = Callable[[float, bool], None]
"""Told how long a handler's call took, and whether it ran on the reactor."""


class Handlers:
    """
    A worker's handlers, by task type, and the calls that run them.

    @ivar stuck: logs a call moved to the reactor that runs for long (the worker stalls).
    @ivar timer: times the calls on the reactor (a test may give a clock of its own).
    @ivar shared: the shared data each task's context holds, by name (read-only).
    """

    def __init__(self) -> None:
        self._handlers: dict[bytes, Registration] = {}
        self._shared: dict[str, bytes] = {}
        self.shared: Mapping[str, bytes] = MappingProxyType(self._shared)
        self.stuck = StuckWatch()
        self.timer: Callable[[], float] = time.perf_counter
        self._threads: ThreadPool | None = None
        self._reactor: Any = None  # its clock, its threads and its connections are used

    def register(self, task_type: str, function: Handler, thread: bool | None = None) -> None:
        """
        Run C{function} for tasks of C{task_type}.

        @param thread: C{True}: always in the thread pool; C{False}: always
            on the reactor (it may return a L{Deferred}).  By default an
            C{async def} function runs on the reactor, and a plain one starts
            in the thread pool and moves to the reactor while its calls are
            short (see L{Placement}): register a function that is quick
            except now and then, when it blocks for long, with C{True}.
        """
        placed = thread is None and not inspect.iscoroutinefunction(function)
        self._handlers[task_type.encode("utf-8")] = Registration(
            function, bool(thread), takes_context(function), Placement() if placed else None
        )

    def handler(self, task_type: str, thread: bool | None = None) -> Callable[[Handler], Handler]:
        """Decorator form of L{register}."""

        def decorate(function: Handler) -> Handler:
            self.register(task_type, function, thread)
            return function

        return decorate

    def run(
        self,
        task: wire.Task | taskflow.Task,
        lease: Lease | None = None,
        timed: Timed | None = None,
    ) -> object:
        """
        Run the handler for C{task}, whose context extends C{lease}; tell
        C{timed} how long its call took, if known.

        @return: a L{Deferred} of its outcome; or, for a handler that ran on
            the reactor and returned a plain value, the outcome itself: its
            return value (done) or a L{Failure} (no handler, or it raised).
            Skipping the Deferred for the common case halves the worker's
            cost per task.  A task whose delivery carried its producer's
            trace runs in its span, when the worker uses OpenTelemetry
            (L{quicx.clients.tracing}).
        """
        registration = self._handlers.get(task.task_type)
        if registration is None:
            name = task.task_type.decode("utf-8", "replace")
            return Failure(LookupError(f"no handler for: {name}"))
        args: tuple[Any, ...] = (task.payload,)
        if registration.wants_context:
            args += (TaskContext.of(task, lease, self.shared),)
        function = registration.function
        if type(task) is taskflow.Task and task.trace is not None:
            function = tracing.traced(task, function)
        placement = registration.placement
        if placement is not None and not placement.inline:
            assert self._threads is not None and self._reactor is not None
            called = deferToThreadPool(self._reactor, self._threads, _timed_call, function, args)
            return called.addCallback(_note_time, placement, timed)
        if registration.in_thread:
            assert self._threads is not None and self._reactor is not None
            if timed is not None:
                timed(0.0, False)
            return deferToThreadPool(self._reactor, self._threads, function, *args)
        started = self.timer()
        if placement is not None:
            self.stuck.begin(task.task_type)
        try:
            result = function(*args)
        except (Exception, SystemExit):  # sys.exit() in a handler fails its task
            result = Failure()
        finally:
            if placement is not None:
                self.stuck.end()
        if result is not None and inspect.isawaitable(result):  # None: the common case, cheaper
            if timed is not None:
                timed(0.0, False)
            return ensureDeferred(result)  # type: ignore[arg-type]
        seconds = self.timer() - started
        if placement is not None:
            placement.ran(seconds, True)
        if timed is not None:
            timed(seconds, True)
        return result

    def _start_threads(self, reactor: Any, threads: int) -> None:
        """
        Start the thread pool, of at most C{threads} (they start only when
        tasks wait for one), and the stuck watch.
        """
        self._reactor = reactor
        self._threads = ThreadPool(minthreads=0, maxthreads=threads, name="quicx-worker")
        self._threads.start()
        self.stuck.start()

    def _stop_threads(self) -> None:
        if self._threads is not None:
            threads, self._threads = self._threads, None
            threads.stop()
        self.stuck.stop()


def _timed_call(function: Handler, args: tuple[Any, ...]) -> tuple[object, float]:
    """In a pool thread: C{function(*args)} (or the L{Failure} it raised), and its seconds."""
    started = time.perf_counter()
    try:
        result: object = function(*args)
    except (Exception, SystemExit):
        result = Failure()
    return result, time.perf_counter() - started


def _note_time(called: tuple[object, float], placement: Placement, timed: Timed | None) -> object:
    """Back on the reactor: note how long a call in a thread took; its outcome."""
    result, seconds = called
    placement.ran(seconds, False)
    if timed is not None:
        timed(seconds, False)
    return result
