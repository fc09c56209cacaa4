"""
What the dashboard's pages show, as JSON-ready documents.

What the dashboard's pages show, as JSON-ready documents: the overview, the
queues, the connections (workers first), and a task looked up by id.  Plain
functions over L{QueueService}'s state: they read, never change.  (The dead
letters and schedules are the documents C{DEAD} and C{SCHEDULES} answer on
the wire; the queues are C{QUEUES}' with each one's unroutable tasks.)
"""

from __future__ import annotations

import base64
from itertools import islice
from typing import Any

from quicx import __version__
from quicx.daemon.observe import status as parts
from quicx.daemon.observe.web.history import Sample
from quicx.daemon.queue import introspect, routing
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused, Task
from quicx.daemon.queue.workers import workers_of
from quicx.documents.typed import as_json
from quicx.protocol.outcomes import OutcomeState
from quicx.protocol.session import Role
from quicx.protocol.taskflow import ResultKind

SHOWN_TASKS = 20
"""The task ids listed per connection (the count is always whole)."""

ANNOUNCED = ("name", "host", "pid", "types", "state")
"""What a worker's record (WORKERS) adds to its connection: what it announced, and its steering."""

SHOWN_RELATIVES = 20
"""The parents and the children a task's page lists (the counts are always whole)."""

TEXT_KINDS = (ResultKind.TEXT, ResultKind.JSON)
"""The checkpoints whose state the task page may show (a small one, whole)."""


def overview(queue: QueueService, sample: Sample | None) -> dict[str, Any]:
    """The overview page (and each live update): totals, what is where now, every queue."""
    tasks, connected = parts.tasks(queue), parts.connections(queue)
    return {
        "version": __version__,
        "uptime": round(queue.clock() - queue.started_at, 1),
        "tasks": {
            "submitted": tasks.submitted,
            "done": tasks.completed,
            "failed": tasks.failed,
            "cancelled": tasks.cancelled,
            "retried": tasks.retried,
            "rejected": tasks.rejected,
        },
        "queued": tasks.queued,
        "running": tasks.running,
        "delayed": tasks.delayed,
        "dead": tasks.dead_now,
        "connections": {
            "total": connected.total,
            "producers": connected.producers,
            "workers": connected.workers,
            "idle_workers": connected.idle_workers,
        },
        "memory": as_json(parts.memory(queue.pool)),
        "results_kept": len(queue.kept),
        "queues": queues(queue),
        "sample": None if sample is None else sample.as_dict(),
    }


def queues(queue: QueueService) -> list[dict[str, Any]]:
    """
    Every queue as C{QUEUES} answers, with C{unroutable}: its queued tasks
    set aside that no connected worker runs, by type (the status
    document's C{tasks.unroutable}, per queue).
    """
    unroutable = routing.unroutable(queue.sessions.values(), queue.queues.values())
    listed = introspect.queues(queue)
    for found in listed:
        found["unroutable"] = unroutable.get(found["name"], {})
    return listed


def connections(queue: QueueService) -> list[dict[str, Any]]:
    """
    Every connection, workers first: who it is, what it serves, what it
    holds (the first L{SHOWN_TASKS}, each with its type and how long it has
    run); a worker's, what it announced (C{name}, C{host}, C{pid}, C{types}:
    C{None} for all) and its C{state} (C{active}, C{quiet}, C{terminating}).
    """
    now = queue.clock()
    announced = {
        record["id"]: {name: record[name] for name in ANNOUNCED}
        for record in workers_of(queue).records()
    }
    sessions = sorted(
        queue.sessions.values(),
        key=lambda s: (s.role is not Role.WORKER, s.session_id),
    )
    return [
        {
            "id": session.session_id,
            "role": session.role.value,
            "peer": session.peer.peer_name,
            "client": session.client or None,
            "identity": session.identity,
            "protocol": session.version,
            "queues": [q.name for q in session.subscriptions],
            "credits": session.credits,
            "held": len(session.tasks),
            "tasks": list(islice(session.tasks, SHOWN_TASKS)),
            "running": [
                {
                    "id": task.task_id,
                    "type": task.task_type.decode("utf-8", "replace"),
                    "queue": task.home.name,
                    "for": round(max(0.0, now - task.dispatched_at), 3),
                }
                for task in islice(session.tasks.values(), SHOWN_TASKS)
            ],
            "idle": session.waiting,
            "silent_for": round(max(0.0, now - session.last_received), 1),
        }
        | announced.get(session.session_id, {})
        for session in sessions
    ]


def checkpoint_text(task: Task, shown: int) -> str | None:
    """
    The state of C{task}'s checkpoint as the task page shows it: when it is
    text or JSON of at most C{shown} bytes (C{[web] payload_preview}), whole;
    else (or with none) C{None}: the page shows only its size and age.
    """
    saved = task.checkpoint
    if saved is None:
        return None
    state = saved.state
    if state.kind not in TEXT_KINDS or len(state.data) > shown:
        return None
    return state.data.decode("utf-8", "replace")


def relatives(queue: QueueService, task: Task) -> dict[str, Any] | None:
    """
    What live C{task} waits for and what waits for it, as the kernel knows
    them (L{quicx.daemon.queue.dependencies}): its parents (the first
    L{SHOWN_RELATIVES}, each C{pending} or not), its group and policy; the
    waiting tasks that name it a parent (the first L{SHOWN_RELATIVES}).
    C{None} when it has neither.  O(its parents + L{SHOWN_RELATIVES}).
    """
    dependencies = queue.dependencies
    task_id, after = task.task_id, task.after
    children = dependencies.children.get(task_id) or {}
    if after is None and not children:
        return None
    answer: dict[str, Any] = {}
    if after is not None:
        pending = [p for p in after.parents if task_id in dependencies.children.get(p, ())]
        waiting = set(pending)
        answer["parents"] = [
            {"id": parent, "pending": parent in waiting}
            for parent in islice(after.parents, SHOWN_RELATIVES)
        ]
        answer["parents_total"] = len(after.parents)
        answer["parents_pending"] = len(pending)
        answer["policy"] = after.policy.name.lower()
        if after.group:
            answer["group"] = {
                "id": after.group,
                "pending": task_id in dependencies.callbacks.get(after.group, ()),
            }
    answer["children"] = list(islice(children, SHOWN_RELATIVES))
    answer["children_total"] = len(children)
    return answer


def lookup(queue: QueueService, task_id: int) -> dict[str, Any]:
    """
    Task C{task_id}: live (queued, delayed, running or dead, as C{INSPECT}
    shows it), finished with its outcome kept, finished with its outcome
    forgotten (C{forgotten}, with why when it was C{evicted} before its time),
    or C{unknown}.
    """
    try:
        return {"found": "live", "task": introspect.inspect(queue, task_id)}
    except Refused:
        pass
    kept = queue.kept.get(task_id)
    if kept is None:
        if not queue.kept.forgot(task_id):
            return {"found": "unknown", "id": task_id}
        eviction = queue.kept.eviction(task_id)
        return {"found": "forgotten", "id": task_id} | ({"evicted": eviction} if eviction else {})
    outcome, data = kept
    answer: dict[str, Any] = {
        "found": "kept",
        "id": task_id,
        "outcome": OutcomeState(outcome.state).name.lower(),
        "kept_until": round(outcome.due, 3),
    }
    if not outcome.kind:
        answer["reason"] = data.decode("utf-8", "replace")
    elif outcome.kind == ResultKind.BYTES:
        answer["result"] = {"kind": "bytes", "base64": base64.b64encode(data).decode()}
    else:
        answer["result"] = {
            "kind": ResultKind(outcome.kind).name.lower(),
            "text": data.decode("utf-8", "replace"),
        }
    return answer
