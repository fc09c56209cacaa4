"""
What a handler knows of its task besides the payload (L{TaskContext}), sans-I/O.

Shared by the Twisted worker (L{quicx.clients.worker}) and the asyncio one
(L{quicx.aio.worker}): each hands its handlers a context whose C{extend},
C{progress} and C{checkpoint} go through its own L{Delivery} (a lease that
sends TOUCH, PROGRESS and CHECKPOINT on its connection).
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from attrs import field, frozen

from quicx.clients.parents import Parent, parents_of
from quicx.clients.progress import ten_thousandths
from quicx.clients.tracing import traceparent, tracestate
from quicx.protocol import taskflow, wire
from quicx.protocol.errors import QuicxError
from quicx.protocol.parents import GroupCounts

MAX_TOUCH = 0xFFFFFFFF
"""The longest extension a TOUCH carries, in seconds."""


def touch_seconds(seconds: float) -> int:
    """
    C{seconds} as TOUCH carries them: whole seconds, rounded up.

    @raise ValueError: not more than 0, or past L{MAX_TOUCH}.
    """
    if not 0 < seconds <= MAX_TOUCH:
        raise ValueError(
            f"a lease is extended by a positive number of seconds up to {MAX_TOUCH:,},"
            f" not {seconds}"
        )
    return math.ceil(seconds)


class Delivery(Protocol):
    """What a context asks of its delivery's lease (a worker's, on its connection)."""

    def extend_soon(self, seconds: float) -> None: ...

    def progress_soon(self, fraction: int, message: str) -> None: ...

    def checkpoint_soon(self, state: object) -> Any: ...


T = TypeVar("T")


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
    @ivar trace: the producer's trace context, as the task carried it (see
        L{traceparent} and L{tracestate}; L{quicx.clients.tracing} runs
        the handler in a span of it when the worker uses OpenTelemetry).
    @ivar saved: the last checkpoint of the task, which this delivery
        resumes from (see L{checkpoint_state}), as it came.
    @ivar parents: the outcomes of the tasks it waited for (C{after}), or of
        its group's members (C{after_group}), in the order they finished;
        a failed one only when it was submitted with C{on_parent_failure="continue"}.
    @ivar group_counts: for a group's callback, the group's counts.
    @ivar parents_left_out: parents whose result did not fit the daemon's
        C{[dependencies] max_results} (they are listed without it).
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
    _delivery: Delivery | None = field(default=None, eq=False, repr=False)
    trace: bytes | None = field(default=None, kw_only=True)
    saved: taskflow.Result | None = field(default=None, kw_only=True, repr=False)
    parents: tuple[Parent, ...] = field(default=(), kw_only=True)
    group_counts: GroupCounts | None = field(default=None, kw_only=True)
    parents_left_out: int = field(default=0, kw_only=True)

    @property
    def traceparent(self) -> str | None:
        """The producer's W3C C{traceparent} (its C{submit} span), if its task carried one."""
        return None if self.trace is None else traceparent(self.trace)

    @property
    def tracestate(self) -> str | None:
        """The producer's W3C C{tracestate}, if its task carried one."""
        return None if self.trace is None else tracestate(self.trace)

    @classmethod
    def of(
        cls,
        task: wire.Task | taskflow.Task,
        delivery: Delivery | None = None,
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
            trace=task.trace,
            saved=task.checkpoint,
            parents=parents_of(task.parents),
            group_counts=None if task.parents is None else task.parents.group,
            parents_left_out=0 if task.parents is None else task.parents.left_out,
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

    def checkpoint(self, state: object) -> Any:
        """
        Save C{state} (bytes, a string, or anything JSON-serialisable, at
        most the daemon's C{max_checkpoint} bytes: 16 KiB by default) as the
        task's checkpoint: its next delivery (a retry, or a redelivery after
        this worker is lost or its lease runs out, or after a restart) gets
        it back as L{checkpoint_state}.  Each replaces the one before.

        In a handler in the thread pool it returns once the daemon holds the
        state as durably as an accepted task; on the reactor (or the asyncio
        worker's loop) it returns an awaitable that completes then:
        C{await context.checkpoint(state)}.

        @raise TypeError: C{state} is none of those.
        @raise ValueError: it is larger than the daemon takes.
        @raise QuicxError: the daemon takes no checkpoints, or the handler has
            finished; a L{quicx.protocol.errors.DaemonError} when the daemon
            refuses it (code 0x08: the delivery is stale, its lease ran out;
            L{quicx.protocol.errors.QueueFull}: the daemon's checkpoint memory
            is full): the task's last checkpoint stands.
        """
        if self._delivery is None:
            raise QuicxError("no checkpoints without a delivery token (a version-1 daemon)")
        return self._delivery.checkpoint_soon(state)

    @property
    def resumed(self) -> bool:
        """Whether this delivery came with a checkpoint of an earlier one."""
        return self.saved is not None

    @property
    def checkpoint_state(self) -> Any:
        """
        The state of the task's last checkpoint, as it was saved (bytes, a
        string, or what the JSON holds); C{None} without one (see L{resumed}).
        """
        return None if self.saved is None else self.saved.value()

    def iterate(self, items: Sequence[T], every: int = 1) -> Iterator[T]:
        """
        C{items} from where the last checkpoint left off, checkpointing the
        index of the next item after every C{every} items and after the
        last: a retry or a redelivery skips what was done.  For a handler
        in the thread pool, where each checkpoint waits until it is durable.

            for row in context.iterate(rows, every=100):
                copy(row)

        @raise ValueError: C{every} is less than 1, or the checkpoint is not
            an index into C{items}.
        """
        start = self.checkpoint_state if self.resumed else 0
        if every < 1 or type(start) is not int or not 0 <= start <= len(items):
            raise ValueError(f"cannot resume {len(items)} items from checkpoint {start!r}")
        for index in range(start, len(items)):
            yield items[index]
            if (index + 1 - start) % every == 0 or index + 1 == len(items):
                self.checkpoint(index + 1)


def takes_context(function: Callable[..., Any]) -> bool:
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
