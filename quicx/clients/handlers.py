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
import os
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from attrs import field, frozen
from twisted.internet.defer import ensureDeferred
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

import twisted
from quicx.clients.adaptive import Placement
from quicx.clients.leases import Lease, touch_seconds
from quicx.clients.progress import ten_thousandths
from quicx.clients.stuck import StuckWatch
from quicx.protocol import taskflow, wire

Handler = Callable[..., Any]

CALLERS = (__file__, os.path.dirname(twisted.__file__) + os.sep)
"""Where the frames that call a handler are (this module, and Twisted's
threads and Deferreds): left out of a failure's traceback."""


@frozen
class TaskContext:
    """
    What a handler may know of its task besides the payload.

    @ivar queue: its queue (C{None} from a version-1 daemon).
    @ivar priority: 0 to 255.
    @ivar attempt: 1 for its first delivery, more when it is run again.
    @ivar enqueued_at: when the daemon accepted it (Unix seconds).
    @ivar key: its idempotency key; C{fairness_key}: its fairness key.
    @ivar token: this delivery's fencing token, larger for every later
        delivery: pass it to your own writes (C{UPDATE ... WHERE fence <
        :token}) to fence out a delivery that was taken back (0: none, from a
        daemon without leases).
    @ivar lease: the seconds this delivery may be held before it is taken
        back, counted from its delivery, unless extended (C{None}: no limit).
    @ivar failures: the failed attempts before this one; C{retries}: how many
        the task may have (0 when it may not retry).
    @ivar shared: the newest version of each shared-data name the worker
        follows (C{Worker(follow=...)}), by name: read-only, and kept up to
        date as new versions come, also while the handler runs.
    """

    task_id: int
    task_type: str
    queue: str | None
    priority: int
    attempt: int
    enqueued_at: float
    key: bytes | None = None
    fairness_key: bytes | None = None
    token: int = 0
    lease: float | None = None
    failures: int = 0
    retries: int = 0
    shared: Mapping[str, bytes] = field(factory=dict, eq=False, repr=False)
    _delivery: Lease | None = field(default=None, eq=False, repr=False)

    @classmethod
    def of(
        cls,
        task: wire.Task | taskflow.Task,
        delivery: Lease | None = None,
        shared: Mapping[str, bytes] | None = None,
    ) -> TaskContext:
        task_type = task.task_type.decode("utf-8", "replace")
        shared = {} if shared is None else shared
        if isinstance(task, wire.Task):
            return cls(task.task_id, task_type, None, 0, 1, time.time(), shared=shared)
        return cls(
            task.task_id,
            task_type,
            task.queue,
            task.priority,
            task.attempt,
            task.enqueued_ms / 1000,
            task.key,
            task.fairness,
            task.token,
            task.lease_ms / 1000 if task.lease_ms else None,
            task.failures,
            task.retries,
            shared,
            delivery,
        )

    def extend(self, seconds: float) -> None:
        """
        Set the lease to run out C{seconds} from now (rounded up to whole
        seconds; the daemon cuts it to its C{max_lease}).  Safe from any
        thread; sent at once, without an answer.  Once the handler has
        finished, or without a token (a daemon without leases), it does
        nothing.

        @raise ValueError: C{seconds} is not more than 0 (or past 2**32).
        """
        touch_seconds(seconds)
        if self._delivery is not None:
            self._delivery.extend_soon(seconds)

    def progress(self, fraction: float, message: str = "") -> None:
        """
        Say how far the handler has got: C{fraction} of the work (0 to 1,
        sent in ten-thousandths) and a short C{message}, for the producer
        that asked for progress, and the daemon's events.  Safe from any
        thread; sent at once, without an answer (the daemon passes on at
        most one a task per C{[progress] interval}, the newest).  Once the
        handler has finished, or without a token (a daemon without leases),
        it does nothing; so it does to a daemon without progress reports.

        @raise ValueError: C{fraction} is not from 0 to 1.
        """
        encoded = ten_thousandths(fraction)
        if self._delivery is not None:
            self._delivery.progress_soon(encoded, message)


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
            function, bool(thread), _takes_context(function), Placement() if placed else None
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
            cost per task.
        """
        registration = self._handlers.get(task.task_type)
        if registration is None:
            name = task.task_type.decode("utf-8", "replace")
            return Failure(LookupError(f"no handler for: {name}"))
        args: tuple[Any, ...] = (task.payload,)
        if registration.wants_context:
            args += (TaskContext.of(task, lease, self.shared),)
        placement = registration.placement
        if placement is not None and not placement.inline:
            assert self._threads is not None and self._reactor is not None
            called = deferToThreadPool(
                self._reactor, self._threads, _timed_call, registration.function, args
            )
            return called.addCallback(_note_time, placement, timed)
        if registration.in_thread:
            assert self._threads is not None and self._reactor is not None
            if timed is not None:
                timed(0.0, False)
            return deferToThreadPool(self._reactor, self._threads, registration.function, *args)
        started = self.timer()
        if placement is not None:
            self.stuck.begin(task.task_type)
        try:
            result = registration.function(*args)
        except (Exception, SystemExit):  # sys.exit() in a handler fails its task
            result = Failure()
        finally:
            if placement is not None:
                self.stuck.end()
        if inspect.isawaitable(result):
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


def _takes_context(function: Handler) -> bool:
    """Whether C{function} takes a second positional argument: the task's context."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional)


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
