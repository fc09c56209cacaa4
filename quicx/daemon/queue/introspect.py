"""
Looking inside the queue: the answers to QUEUES, PEEK and INSPECT, and why
a waiting task is not running yet.

Plain functions over L{QueueService}'s state, answering JSON-ready dicts
(the INFO documents of docs/protocol.md).  They read, never change.
"""

from __future__ import annotations

import base64
from typing import Any

from quicx.daemon.queue import routing
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.graveyard import describe_dead
from quicx.daemon.queue.model import Task
from quicx.daemon.queue.state import DEAD, DELAYED, HELD, WAITING
from quicx.documents.status import Queue
from quicx.documents.typed import as_json
from quicx.protocol.outcomes import MAX_FRACTION


def queue_states(service: QueueService) -> tuple[Queue, ...]:
    """Every queue, by name."""
    now = service.clock()
    return tuple(service.queues[name].describe(now) for name in sorted(service.queues))


def queues(service: QueueService) -> list[dict[str, Any]]:
    """Every queue, by name, as QUEUES answers."""
    return [as_json(queue) for queue in queue_states(service)]


def describe(task: Task, now: float) -> dict[str, Any]:
    """One task, as PEEK and INSPECT show it."""
    return {
        "id": task.task_id,
        "type": task.task_type.decode("utf-8", "replace"),
        "queue": task.home.name,
        "priority": task.priority,
        "state": state(task),
        "size": task.size,
        "age": round(max(0.0, now - task.enqueued_at), 3),
        "attempt": task.attempts,
        "fairness_key": None if task.fairness is None else task.fairness.decode("utf-8", "replace"),
    }


SHOWN = {HELD: "running", DELAYED: "delayed", DEAD: "dead", WAITING: "waiting"}
"""How INSPECT and PEEK name a task's state (any other: C{queued})."""


def state(task: Task) -> str:
    """
    C{running}, C{delayed} (waiting for its time), C{dead}, C{waiting} (for
    other tasks), or C{queued}.
    """
    return SHOWN.get(task.state, "queued")


def peek(service: QueueService, name: str, count: int) -> list[dict[str, Any]]:
    """
    The next C{count} tasks of queue C{name}, in dispatch order.

    @raise Refused: (not found) there is no such queue.
    """
    queue = service.find_queue(name)
    now = service.clock()
    found: list[dict[str, Any]] = []
    for task in queue.tasks():
        if len(found) == count:
            break
        found.append(describe(task, now))
    return found


def inspect(service: QueueService, task_id: int) -> dict[str, Any]:
    """
    One live task, with its last progress report if it sent one and its
    checkpoint if it has one; for a queued one, why it is not running yet.

    @raise Refused: (not found) there is no such live task.
    """
    task = service.task(task_id)
    now = service.clock()
    answer = describe(task, now)
    answer["failures"] = task.failures
    answer["retries"] = task.retries
    if task.deadline:  # it waits, held to a deadline to start
        answer["deadline"] = round(task.deadline, 3)
    report = service.progress.last(task_id)
    if report is not None:
        answer["progress"] = {
            "fraction": report.fraction / MAX_FRACTION,
            "message": report.message,
            "at": round(report.at, 3),
        }
    checkpoint = service.checkpoints.describe(task)
    if checkpoint is not None:
        answer["checkpoint"] = checkpoint
    if task.holder is not None:  # held (the state HELD), by it
        answer["worker"] = task.holder.peer.peer_name
        answer["running_for"] = round(max(0.0, now - task.dispatched_at), 3)
        return answer
    if task.state is DEAD:
        answer.update(describe_dead(task))
        answer["payload_base64"] = base64.b64encode(service.pool.read(task.block)).decode()
        return answer
    if task.state is WAITING:
        answer["why"] = [service.dependencies.describe(task)]
        return answer
    if task.state is DELAYED:
        answer["due"] = round(task.due, 3)
        answer["why"] = [
            {
                "reason": "delayed",
                "until": round(task.due, 3),
                "text": f"it is delayed for {max(0.0, task.due - now):.1f} s more"
                + (f" (retry {task.failures} of {task.retries})" if task.failures else ""),
            }
        ]
        return answer
    reasons, ahead = why(service, task, now)
    answer["why"] = reasons
    answer["ahead"] = ahead
    rate = task.home.drain_rate(now)
    answer["drain_rate"] = round(rate, 3)
    answer["estimated_start"] = round(now + ahead / rate, 3) if rate else None
    return answer


def why(service: QueueService, task: Task, now: float) -> tuple[list[dict[str, Any]], int]:
    """The reasons C{task} waits, and how many tasks go before it."""
    queue = task.home
    name = queue.name
    reasons: list[dict[str, Any]] = []
    if queue.paused:
        reasons.append({"reason": "paused", "text": f"queue {name} is paused"})
    if not queue.subscribers:
        reasons.append({"reason": "no_workers", "text": f"no worker is subscribed to queue {name}"})
    routed = routing.why(service.sessions.values(), task)
    if routed is not None:
        reasons.append(routed)
    # A task set aside by type waits for a worker of its type, not its turn.
    ahead, higher = (0, 0) if queue.parked and queue.is_parked(task) else queue.ahead(task)
    if ahead:
        reasons.append(
            {
                "reason": "ahead",
                "ahead": ahead,
                "higher_priority": higher,
                "text": f"{ahead} {'task is' if ahead == 1 else 'tasks are'} ahead of it"
                f" in queue {name}, {higher} of them at a higher priority",
            }
        )
    policy = queue.policy
    state = queue.keys.get(task.fairness) if task.fairness is not None else None
    if state is not None and policy.key_concurrency and state.running >= policy.key_concurrency:
        key = task.fairness.decode("utf-8", "replace") if task.fairness else ""
        reasons.append(
            {
                "reason": "key_concurrency",
                "key": key,
                "running": state.running,
                "limit": policy.key_concurrency,
                "text": f"fairness key {key!r} already runs {state.running} tasks"
                f" (key_concurrency = {policy.key_concurrency})",
            }
        )
    buckets = [queue.bucket, state.bucket if state is not None else None]
    until = max((b.next_token(now) for b in buckets if b is not None), default=now)
    if until > now:
        reasons.append(
            {
                "reason": "rate_limited",
                "until": round(until, 3),
                "text": f"rate-limited for {until - now:.1f} s more",
            }
        )
    if queue.subscribers and not queue.idle and not queue.paused:
        reasons.append(
            {
                "reason": "workers_busy",
                "workers": queue.subscribers,
                "text": f"all {queue.subscribers} workers of queue {name} are busy",
            }
        )
    return reasons, ahead
