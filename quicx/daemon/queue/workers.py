"""
The connected workers as an admin sees and steers them: what each announced, quiet and terminate.

L{Workers} is the in-process API that WORKERS and STEER (and a dashboard)
use: L{Workers.records} lists the connected workers; L{Workers.quiet} and
L{Workers.terminate} steer one (by its session id) or every version-2
worker (id 0).  The daemon tells the worker with STOP
(L{quicx.protocol.workers}).

  - C{quiet}: the worker finishes what it holds and is dealt no more, at
    once (its credits drop to 0, whatever a later READY asks); it stays
    connected, listed C{quiet}, until it leaves or is terminated.
  - C{terminate}: what it holds is queued again at once (at the head of
    its queues, as when a worker disconnects), it is dealt no more, and
    its connection is closed after C{grace} seconds unless it closes
    first.  An outcome it still sends for a task it held is refused as
    stale, as a late one is.

A version-1 worker cannot be told, so it cannot be steered (ERROR 0x0A).
"""

from __future__ import annotations

import json
from typing import Any
from weakref import WeakKeyDictionary

from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused, Session, Steering, WorkerCard
from quicx.protocol import codec, workers
from quicx.protocol.codec import ErrorCode
from quicx.protocol.session import ProtocolViolation, Role

MAX_TASKS_LISTED = 16
"""The most held tasks one worker's record lists (its oldest; C{holding} counts them all)."""


class Workers:
    """The workers of C{kernel}, steered."""

    def __init__(self, kernel: QueueService) -> None:
        self.kernel = kernel

    def announce(self, session: Session, message: workers.Announce, max_types: int) -> None:
        """
        A connection's ANNOUNCE: the types it runs, and what it is.

        @raise ProtocolViolation: it is not a new connection (ANNOUNCE comes
            before the first READY, once), or names more than C{max_types}.
        """
        if session.role is not Role.NEW or session.card is not None:
            raise ProtocolViolation(
                "ANNOUNCE comes once, before the connection's first READY or FOLLOW"
            )
        if message.types is not None and len(message.types) > max_types:
            raise ProtocolViolation(
                f"ANNOUNCE names {len(message.types)} task types, more than"
                f" max_worker_types ({max_types})"
            )
        session.card = WorkerCard(message.name, message.host, message.pid)
        session.handles = message.types

    def records(self) -> list[dict[str, Any]]:
        """Every connected worker, by id (the dashboard's list)."""
        now = self.kernel.clock()
        return [
            _record(session, now)
            for _, session in sorted(self.kernel.sessions.items())
            if session.role is Role.WORKER
        ]

    def page(self, after: int, budget: int) -> tuple[list[dict[str, Any]], int | None]:
        """
        What WORKERS answers: the workers after id C{after}, by id, as many as
        C{budget} bytes of JSON hold (one at least), and the id to ask after
        next (C{None}: that was the last).
        """
        now = self.kernel.clock()
        found: list[dict[str, Any]] = []
        size = 2
        for session_id in sorted(i for i in self.kernel.sessions if i > after):
            session = self.kernel.sessions[session_id]
            if session.role is not Role.WORKER:
                continue
            record = _record(session, now)
            size += len(json.dumps(record, separators=(",", ":"), ensure_ascii=False)) + 1
            if found and size > budget:
                return found, found[-1]["id"]
            found.append(record)
        return found, None

    def quiet(self, worker: int) -> list[int]:
        """Quiet worker C{worker} (0: every active version-2 worker); the ids steered."""
        steered = self._targets(worker)
        for session in steered:
            card = _card(session)
            if card.state is Steering.ACTIVE:
                card.state = Steering.QUIET
                self._hold(session)
                session.peer.sendFrame(workers.encode_stop(workers.Steer.QUIET))
        return [session.session_id for session in steered]

    def terminate(self, worker: int, grace: float) -> list[int]:
        """
        Terminate worker C{worker} (0: every version-2 worker not already
        terminating): its tasks are queued again, its connection closed
        after C{grace} seconds.  The ids steered.
        """
        steered = self._targets(worker)
        for session in steered:
            card = _card(session)
            if card.state is Steering.TERMINATING:
                continue
            card.state = Steering.TERMINATING
            self._hold(session)
            session.peer.sendFrame(
                workers.encode_stop(workers.Steer.TERMINATE, round(grace * 1000))
            )
            if session.tasks:
                late = {task_id: (task, task.attempts) for task_id, task in session.tasks.items()}
                self.kernel.roster.take_back_held(session, "was terminated", lost=False)
                # Its outcomes for them are late ones: refused as stale.
                session.overdue.update(late)
            self.kernel.scheduler.callLater(grace, _close, session)
        self.kernel.check_drain()
        return [session.session_id for session in steered]

    def _hold(self, session: Session) -> None:
        """Deal C{session} no more tasks (a READY cannot give it credits back: L{credits})."""
        session.credits = 0
        self.kernel.dispatcher.unidle(session)

    def _targets(self, worker: int) -> list[Session]:
        """
        @raise Refused: (not found) no worker C{worker} is connected;
            (0x0A) it speaks version 1, and cannot be told.
        """
        sessions = self.kernel.sessions
        if not worker:
            return [
                s
                for _, s in sorted(sessions.items())
                if s.role is Role.WORKER and s.version == codec.VERSION
            ]
        session = sessions.get(worker)
        if session is None or session.role is not Role.WORKER:
            raise Refused(ErrorCode.NOT_FOUND, f"no worker {worker} is connected")
        if session.version != codec.VERSION:
            raise Refused(
                ErrorCode.UNSTEERABLE,
                f"worker {worker} speaks protocol version 1: it cannot be told to stop",
            )
        return [session]


def credits(session: Session, asked: int) -> int:
    """The credits a worker's READY gets: none once it is quiet or terminating."""
    card = session.card
    return asked if card is None or card.state is Steering.ACTIVE else 0


_BY_KERNEL: WeakKeyDictionary[QueueService, Workers] = WeakKeyDictionary()


def workers_of(kernel: QueueService) -> Workers:
    """The L{Workers} of C{kernel} (one per kernel, made on first use)."""
    found = _BY_KERNEL.get(kernel)
    if found is None:
        found = _BY_KERNEL[kernel] = Workers(kernel)
    return found


def _card(session: Session) -> WorkerCard:
    if session.card is None:
        session.card = WorkerCard()
    return session.card


def _close(session: Session) -> None:
    """A terminated worker's grace is over: close its connection, if it is still open."""
    if session.connected:
        session.peer.disconnect()


def _record(session: Session, now: float) -> dict[str, Any]:
    card = session.card or WorkerCard()
    held = list(session.tasks.values())[:MAX_TASKS_LISTED]
    handles = session.handles
    return {
        "id": session.session_id,
        "address": session.peer.peer_name,
        "protocol": session.version,
        "client": session.client,
        "name": card.name,
        "host": card.host,
        "pid": card.pid or None,
        "queues": [queue.name for queue in session.subscriptions],
        "types": None if handles is None else sorted(t.decode("utf-8", "replace") for t in handles),
        "credits": session.credits,
        "holding": len(session.tasks),
        "tasks": [
            {
                "id": task.task_id,
                "type": task.task_type.decode("utf-8", "replace"),
                "for": round(max(0.0, now - task.dispatched_at), 3),
            }
            for task in held
        ],
        "state": card.state.value,
    }
