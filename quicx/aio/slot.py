"""
One asyncio worker connection (a slot): TASKs in, handlers run on the loop, outcomes out.

It opens with HELLO (falling back to version 1), FOLLOWs the shared
data if it is the worker's follower (L{quicx.clients.following}), sends
READY with its credits (the worker's share for it, L{quicx.clients.shares};
chosen by its handlers' pace unless given, as the Twisted runner's are:
L{quicx.clients.adaptive.AutoCredits}) and the worker's queues, runs each
TASK's handler (an C{async def} one as a task of the loop), and reports
its outcome with L{quicx.clients.reports.report}: the outcomes found while
a read is handled go in one write.  Each delivery's lease (L{AsyncLease}) sends the
handler's TOUCH, PROGRESS and CHECKPOINT, and keeps it alive with C{auto_extend}.

The protocol does not tell a worker that its task was cancelled (CANCEL
of a running task is refused as a conflict); it does tell it, in answer
to a TOUCH or PROGRESS, that its delivery is stale: its lease ran out and
the task was taken back.  The slot then cancels that handler (its
C{asyncio.CancelledError}) and reports it failed, which the daemon
refuses as stale but which gives the credit back.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from quicx.clients import failover, operations, tracing
from quicx.clients.checkpoints import Saves
from quicx.clients.connection import (
    Answer,
    ClientConnection,
    Greeted,
    Rejected,
    Send,
    Unanswered,
    client_parser,
)
from quicx.clients.context import TaskContext, touch_seconds
from quicx.clients.credits import Credited
from quicx.clients.reports import Raised, Unrecoverable, failure_reason, report
from quicx.clients.shares import Member
from quicx.protocol import codec, outcomes, shared_data, taskflow, wire, workers
from quicx.protocol.errors import NotPrimary, QuicxError
from quicx.protocol.frames import Frame

log = logging.getLogger("quicx.aio.worker")
log.addHandler(logging.NullHandler())

HELLO_TIMEOUT = 10.0
"""Seconds a slot waits for the answer to its HELLO before it closes the connection."""

_STALE = re.compile(r"task (\d+): delivery (\d+) ")
"""The daemon's stale ERROR names the task and the delivery's token (docs/protocol.md)."""


class Handlers(Protocol):
    """What a slot needs of its worker (L{quicx.aio.worker.AsyncWorker})."""

    credits: int | None
    queues: tuple[str, ...]
    follow: tuple[str, ...]
    protocol: int
    auto_extend: bool
    failover: bool

    def handler_for(self, task_type: bytes) -> tuple[Callable[..., Any], bool] | None: ...

    def told_to_stop(self, stop: workers.Stop, slot: AsyncSlot) -> None: ...

    def _slot_connected(self, slot: AsyncSlot) -> None: ...

    def _slot_greeted(self, slot: AsyncSlot) -> bool: ...

    def _slot_lost(self, slot: AsyncSlot) -> None: ...

    def followed(self, following: object, slot: AsyncSlot) -> None: ...

    def shared_arrived(self, shared: shared_data.Shared, slot: AsyncSlot) -> None: ...


class AsyncLease:
    """
    The lease of one delivery while its handler runs, on the loop: TOUCH
    when the handler asks, or every half lease with C{keep_alive}; the
    handler's PROGRESS; nothing after its outcome.
    """

    def __init__(
        self,
        send: Callable[[bytes], None],
        task: taskflow.Task,
        reports: bool,
        saves: Saves | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._saves = saves or Saves(None)
        self._send = send
        self.task_id, self.token = task.task_id, task.token
        self.seconds = task.lease_ms / 1000
        self.deadline = self._loop.time() + self.seconds if self.seconds else None
        self.reports = reports
        self.ended = False
        self._renewal: asyncio.TimerHandle | None = None

    def extend(self, seconds: float) -> None:
        whole = touch_seconds(seconds)
        if not self.ended:
            self._send(outcomes.encode_touch(self.task_id, self.token, whole))
            self.deadline = self._loop.time() + whole

    def extend_soon(self, seconds: float) -> None:
        """L{extend}, from any thread; checked here."""
        touch_seconds(seconds)
        self._loop.call_soon_threadsafe(self.extend, seconds)

    def progress_soon(self, fraction: int, message: str) -> None:
        if self.reports:
            frame = outcomes.encode_progress(self.task_id, self.token, fraction, message)
            self._loop.call_soon_threadsafe(self._send_unless_ended, frame)

    def _send_unless_ended(self, frame: bytes) -> None:
        if not self.ended:
            self._send(frame)

    def checkpoint_soon(self, state: object) -> asyncio.Future[bool]:
        """
        CHECKPOINT C{state}, on the loop: a future, done (C{True}) once the
        daemon holds it durably, or failed with its refusal.
        """
        if self.ended:
            raise QuicxError(f"task {self.task_id}: no checkpoint after its outcome")
        answer: asyncio.Future[bool] = self._loop.create_future()

        def answered(error: Exception | None) -> None:
            if answer.done():
                return
            if error is None:
                answer.set_result(True)
            else:
                answer.set_exception(error)

        self._send(self._saves.frame(self.task_id, self.token, state, answered))
        return answer

    def keep_alive(self) -> None:
        """Every half lease until L{end}, extend it by its length unless it has that left."""
        if self.seconds and not self.ended:
            self._renewal = self._loop.call_later(self.seconds / 2, self._renew)

    def _renew(self) -> None:
        if self.deadline is None or self.deadline - self._loop.time() <= self.seconds:
            self.extend(self.seconds)
        self.keep_alive()

    def end(self) -> None:
        self.ended = True
        if self._renewal is not None:
            self._renewal.cancel()


class AsyncSlot(asyncio.Protocol, Credited):
    """
    One worker connection: READY once, then up to C{credits} tasks at a time.

    @ivar place: its daemon and its place among that daemon's slots
        (C{None}: a connection made by hand, with the worker's credits).
    @ivar auto: its credits' choice by its handlers' pace (C{None}: given).
    @ivar running: the handlers running, by task id, with their leases.
    @ivar closed: resolved once the connection has closed.
    """

    def __init__(
        self,
        worker: Handlers,
        shared: Mapping[str, bytes],
        place: tuple[Member[AsyncSlot], int] | None = None,
    ) -> None:
        self.worker = worker
        self.shared = shared
        self.place = place
        self._conn = ClientConnection(worker.protocol)
        self._parser = client_parser()
        self.transport: asyncio.Transport | None = None
        self.version = worker.protocol
        self._choose_credits(worker.credits)
        self.running: dict[int, tuple[asyncio.Task[None] | None, AsyncLease | None]] = {}
        self.stopping = False
        self.quiet = False  # the daemon told it so: it is sent no more tasks
        self.capabilities: frozenset[str] = frozenset()
        self.max_result: int | None = None
        self.max_reason = 1024
        self.saves = Saves(None)  # its handlers' checkpoints waiting for their answers
        # With failover: the daemon said it is not the primary (at HELLO, or refusing a request).
        self.refusal: NotPrimary | None = None
        self.primary = False  # its daemon answered HELLO as one that serves workers
        self._answered = False  # a TASK or WAIT came: READY was taken
        self._replies: list[bytes] | None = None  # outcomes found while a read is handled
        self._no_answer: asyncio.TimerHandle | None = None
        self._lost: set[int] = set()  # the handlers cancelled because their leases were lost
        self.greeted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        hello = self._conn.connect()
        if hello:
            self._write(hello)
            loop = asyncio.get_running_loop()
            self._no_answer = loop.call_later(HELLO_TIMEOUT, self._abort, "no answer to HELLO")
        else:
            self._answered_hello()
            self._ready()

    @property
    def _greeted(self) -> bool:
        return self._conn.greeted

    def _answered_hello(self) -> None:
        if not self.greeted.done():
            self.greeted.set_result(None)
        self.worker._slot_connected(self)

    def _ready(self) -> None:
        self._write(self._ready_frame(self.worker.queues))

    def follow(self) -> None:
        """Follow the worker's shared data on this connection (its FOLLOW answer comes later)."""
        self._write(self._conn.send(operations.follow(self.worker.follow)))

    def _abort(self, why: str) -> None:
        log.warning("%s; closing this connection", why)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._no_answer is not None:
            self._no_answer.cancel()
        self.saves.lost(str(exc or "closed"))
        if self.running:
            log.info(
                "%d task(s) in hand as the connection closed: their outcomes are dropped,"
                " and the daemon delivers them again",
                len(self.running),
            )
        for _, lease in self.running.values():
            if lease is not None:
                lease.end()  # its outcome cannot be reported: the daemon requeues it
        if not self.greeted.done():
            self.greeted.set_exception(ConnectionError(f"closed before HELLO was answered: {exc}"))
        self.worker._slot_lost(self)
        self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        replies: list[bytes] = []
        self._replies = replies
        self._received = 0
        try:
            for frame in self._parser.feed(data):
                if type(frame) is not Frame:
                    self._abort(f"the daemon sent a bad frame: {frame.reason}")
                    return
                self._frame(frame)
        finally:
            self._replies = None
            if self._received and self.auto is not None:
                self._pace(replies)
            if replies and self.transport is not None:
                self.transport.write(b"".join(replies))
            self._close_if_done()

    def _frame(self, frame: Frame) -> None:
        kind = frame.message_type
        if self._conn.greeted and kind == wire.MessageType.TASK:
            self._answered = True
            task: wire.Task | taskflow.Task = (
                taskflow.decode_task(frame.payload)
                if self.version == codec.VERSION
                else wire.decode_task(frame.payload)
            )
            self._received += 1
            self._start(task)
        elif self._conn.greeted and kind == wire.MessageType.WAIT:
            self._answered = True
        elif self.version == codec.VERSION and kind == codec.MessageType.CHECKPOINT:
            self.saves.answered(frame.payload)  # a bad one: MalformedMessage, as a bad TASK
        elif kind == codec.MessageType.STOP and self.version == codec.VERSION:
            self.worker.told_to_stop(workers.decode_stop(frame.payload), self)
        elif kind == codec.MessageType.SHARED and self.version == codec.VERSION:
            self.worker.shared_arrived(shared_data.decode_shared(frame.payload), self)
        else:
            events: list[Any] = []
            self._conn.receive_frame(self._parser.version, kind, frame.payload, events)
            for event in events:
                if isinstance(event, Send):
                    self._write(event.data)
                elif isinstance(event, Greeted):
                    self._hello_answered(event)
                elif isinstance(event, Answer):  # FOLLOW's: what exists of what it follows
                    self._followed(event.value)
                elif isinstance(event, Unanswered) and isinstance(event.message, wire.Error):
                    self._refused(event.message)
                elif isinstance(event, Rejected):
                    self._abort(f"the daemon sent {event.reason}")

    def _hello_answered(self, greeted: Greeted) -> None:
        if self._no_answer is not None:
            self._no_answer.cancel()
        self.version = greeted.version
        server = greeted.server
        capabilities, limits = server.get("capabilities"), server.get("limits")
        if isinstance(capabilities, list):
            self.capabilities = frozenset(map(str, capabilities))
        limits = limits if isinstance(limits, dict) else {}
        if isinstance(limits.get("max_result"), int):
            self.max_result = limits["max_result"]
        if isinstance(limits.get("max_reason"), int) and limits["max_reason"] > 0:
            self.max_reason = limits["max_reason"]
        if "checkpoints" in self.capabilities and isinstance(limits.get("max_checkpoint"), int):
            self.saves.limit = limits["max_checkpoint"]
        refusal = failover.not_primary(server) if self.worker.failover else None
        if refusal is not None:
            if not self.greeted.done():
                self.greeted.set_result(None)
            self._not_primary(refusal)
            return
        self.primary = True
        self._answered_hello()
        if greeted.fell_back and (self.worker.queues or self.worker.follow):
            log.warning(
                "the daemon speaks protocol version 1 only: this worker serves its default"
                " queue, and gets no shared data"
            )
        elif self.worker.follow and "shared" not in self.capabilities:
            log.error(
                "the daemon has no shared data: handlers see none of %s",
                ", ".join(self.worker.follow),
            )
        elif self.worker.follow and not self.worker._slot_greeted(self):
            return  # its READY waits until the shared data has come
        self._ready()

    def _followed(self, value: Any) -> None:
        if isinstance(value, Exception):
            log.error(
                "the daemon refuses to send shared data %s (%s): handlers see none",
                ", ".join(self.worker.follow),
                value,
            )
            self.worker.followed({}, self)
        else:
            self.worker.followed(value.get("following", {}), self)

    def _refused(self, error: wire.Error) -> None:
        """An ERROR no request is owed: of READY's credits, or of a report, TOUCH or PROGRESS."""
        chosen = self.auto is not None
        if (
            not self._answered
            and error.code == wire.ErrorCode.INVALID_MESSAGE
            and self._credits_refused()
        ):
            if not chosen:
                log.warning(
                    "the daemon refuses READY credits (%s): one task at a time", error.message
                )
            self._ready()
        elif error.code == codec.ErrorCode.STALE:
            self._stale(error.message)
        elif error.code == codec.ErrorCode.NOT_PRIMARY:
            self._not_primary(NotPrimary(error.message, error.code))
        else:
            log.error("daemon error: %s", error.message)

    def _not_primary(self, refusal: NotPrimary) -> None:
        """
        The daemon is not its shard's primary: close; the worker connects to
        the primary it names (with failover), or here again later.  The
        tasks held are delivered again by the primary; their outcomes are dropped.
        """
        if self.refusal is None:
            self.refusal = refusal
            log.info(
                "the daemon is not the primary (primary: %s); closing this connection",
                refusal.primary or "none known",
            )
        if self.transport is not None:
            self.transport.close()

    def _stale(self, message: str) -> None:
        """
        A delivery's lease ran out and its task was taken back: cancel its
        handler, if it still runs (its report, refused, gives the credit back).
        """
        found = _STALE.match(message)
        task_id, token = (int(found[1]), int(found[2])) if found else (0, 0)
        handler, lease = self.running.get(task_id, (None, None))
        if handler is None or lease is None or lease.token != token:
            log.warning("the daemon refused a stale report (%s)", message)
            return
        log.warning("task %s: its lease was lost (%s); cancelling its handler", task_id, message)
        self._lost.add(task_id)
        handler.cancel()

    # -- tasks --------------------------------------------------------------------------

    def _start(self, task: wire.Task | taskflow.Task) -> None:
        """Run C{task}'s handler: a plain function's outcome is reported at once."""
        lease = None
        if isinstance(task, taskflow.Task) and task.token:
            self._lease_seconds = task.lease_ms / 1000 if task.lease_ms else None
            lease = AsyncLease(self._write, task, "progress" in self.capabilities, self.saves)
            if self.worker.auto_extend:
                lease.keep_alive()
        found = self.worker.handler_for(task.task_type)
        started = time.perf_counter()
        try:
            if found is None:
                raise LookupError(f"no handler for: {task.task_type.decode('utf-8', 'replace')}")
            function, wants_context = found
            args: tuple[Any, ...] = (task.payload,)
            if wants_context:
                args += (TaskContext.of(task, lease, self.shared),)
            if type(task) is taskflow.Task and task.trace is not None:
                function = tracing.traced(task, function)
            result = function(*args)
        except (Exception, SystemExit) as e:
            if self.auto is not None:
                self.auto.ran(time.perf_counter() - started, True)
            self._finished(task, lease, Raised.of(e, skip=1), True)
            return
        awaitable = result is not None and inspect.isawaitable(result)  # None: the common case
        if self.auto is not None:
            # A coroutine holds the connection's only credit while it runs.
            self.auto.ran(0.0 if awaitable else time.perf_counter() - started, not awaitable)
        if not awaitable:
            self._finished(task, lease, result, False)
            return
        handler = asyncio.ensure_future(self._await(task, lease, result))
        self.running[task.task_id] = (handler, lease)

    async def _await(
        self, task: wire.Task | taskflow.Task, lease: AsyncLease | None, result: Any
    ) -> None:
        try:
            value = await result
        except asyncio.CancelledError:
            lost = task.task_id in self._lost
            self._lost.discard(task.task_id)
            why = "its lease ran out and the task was taken back" if lost else "it was cancelled"
            self._finished(task, lease, Raised(asyncio.CancelledError(why), []), True)
        except (Exception, SystemExit) as e:
            self._finished(task, lease, Raised.of(e, skip=1), True)
        else:
            self._finished(task, lease, value, False)

    def _finished(
        self, task: wire.Task | taskflow.Task, lease: AsyncLease | None, result: Any, failed: bool
    ) -> None:
        self.running.pop(task.task_id, None)
        if lease is not None:
            lease.end()
        if failed:
            log.warning(
                "task %s (%s) failed%s: %s",
                task.task_id,
                task.task_type.decode("utf-8", "replace"),
                " for good" if isinstance(result.value, Unrecoverable) else "",
                failure_reason(result, 16 * 1024),
            )
        try:
            frame = report(
                task,
                result,
                self.max_result,
                "results" in self.capabilities,
                self.max_reason,
                failed,
            )
        except Exception as e:  # never leave a task held for want of a frame
            unsent = Raised(Unrecoverable(f"the outcome could not be sent: {e!r}"), [])
            frame = report(task, unsent, failed=True)
        self._write(frame)
        self._close_if_done()

    def _in_hand(self) -> int:
        return len(self.running)

    def _write(self, frame: bytes) -> None:
        """Send C{frame}: at the end of the read being handled, if any, else now."""
        if self._replies is not None:
            self._replies.append(frame)
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame)

    def _close_if_done(self) -> None:
        if (
            self.stopping
            and not self.running
            and self._replies is None
            and self.transport is not None
        ):
            self.transport.close()

    def terminate(self) -> None:
        """Stop now (the daemon said so, and queued again what it held): cancel, disconnect."""
        self.stopping = True
        for task, _ in list(self.running.values()):
            if task is not None:
                task.cancel()
        if self.transport is not None:
            self.transport.abort()

    def stop(self) -> asyncio.Future[None]:
        """Finish the tasks in hand, if any, then disconnect."""
        self.stopping = True
        self._close_if_done()
        return self.closed
