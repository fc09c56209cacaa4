"""
The journal's side of the kernel: the snapshot it writes, and the restore of what it kept.
"""

from __future__ import annotations

from quicx.daemon.journal.interface import Snapshot
from quicx.daemon.journal.records import Recovery
from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Task
from quicx.daemon.queue.state import DEAD, DELAYED, move
from quicx.protocol import taskflow


def snapshot(kernel: IKernel) -> Snapshot:
    """
    (The journal.) The live tasks oldest first, the paused queues, the
    remembered keys, the schedules' state, the shared data, the kept
    outcomes and the groups.
    """
    read = kernel.pool.read
    schedules = kernel.schedules
    return Snapshot(
        [(task, read(task.block)) for task in kernel._live.values()],
        [queue.name for queue in kernel.queues.values() if queue.paused],
        list(kernel.keys.entries()),
        [] if schedules is None else schedules.last_fires(),
        [] if schedules is None else schedules.definitions(),
        [] if kernel.shared is None else kernel.shared.versions(),
        list(kernel.kept.entries()),
        kernel.kept.forgotten_ids(),
        list(kernel.groups.entries()),
        kernel.kept.evicted_ids(),
    )


def restore(kernel: IKernel, recovery: Recovery) -> None:
    """
    Queue the tasks a journal kept, in their order and with their ids and
    queues; pause the queues it paused; remember its keys; keep its kept
    outcomes and groups.  A task's producer is gone: its outcome is kept
    (as one nobody asked for) where version 2 is spoken.

    @raise pmad.PmadError: they do not fit this pool.
    @raise Refused: they need more queues than C{max_queues}.
    """
    now = kernel.clock()
    dead: list[Task] = []
    kernel.groups.restore(recovery.groups, recovery.last_group_id)
    for name in recovery.paused:
        kernel._queue(name).paused = True
    for recovered in recovery.tasks:
        payload = recovered.payload
        block = kernel.pool.store(payload)
        queue = kernel.default_queue if recovered.queue is None else kernel._queue(recovered.queue)
        key, fairness = recovered.key, recovered.fairness
        task = Task(
            recovered.task_id,
            recovered.task_type,
            block,
            len(payload),
            None,
            queue,
            queue.policy.priority if recovered.priority is None else recovered.priority,
            now if recovered.enqueued_at is None else recovered.enqueued_at,
            key,
            fairness,
            retries=recovered.retries,
            failures=recovered.failures,
            attempts=recovered.attempts,
            backoff=None
            if recovered.backoff is None
            else taskflow.Backoff._make(recovered.backoff),
            dead=recovered.dead,
            keep_for=recovered.keep_for,
            recovered=True,
            group=recovered.group if kernel.groups.get(recovered.group) else 0,
            tally=kernel._tally(queue, recovered.task_type),
            ready_at=now,
        )
        kernel._live[task.task_id] = task
        for announce in kernel.hooks.recovered:
            announce(task, recovered.due)
        if key is not None:
            kernel.keys.add(queue.name, key, task)
        if task.dead is not None:
            move(task, DEAD)
            dead.append(task)
        elif recovered.due:
            # Due while the daemon was down: queued at once, in due order.
            move(task, DELAYED)
            kernel._delay(task, recovered.due)
        else:
            kernel._push(task)
    dead.sort(key=lambda task: task.dead.died_at if task.dead else 0.0)
    for task in dead:
        task.home.dead += 1
    kernel.graveyard.keep(dead)
    kernel.keys.restore(recovery.keys, now)
    kernel._last_task_id = recovery.last_task_id
    # After the tasks: a task's payload comes before a kept result.
    kernel.kept.restore(recovery.kept, recovery.forgotten, recovery.evicted)
