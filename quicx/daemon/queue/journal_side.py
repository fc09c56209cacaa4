"""
The journal's side of the kernel: the snapshot it writes, the restore of what it kept, its answers.

What the journal tells the kernel (a waiting task's record is durable:
L{accepted}; it could not be written: L{refused}) and what it asks of it
(L{snapshot}); each a function of the kernel it is handed (L{IKernel}).
"""

from __future__ import annotations

from quicx.daemon.journal.interface import Snapshot
from quicx.daemon.journal.records import Recovery
from quicx.daemon.queue.extras import Extras
from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import After, Duplicate, Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.state import DEAD, DELAYED, QUEUED, WAITING, move
from quicx.protocol import taskflow
from quicx.protocol.codec import ErrorCode
from quicx.protocol.parents import ParentPolicy


def snapshot(kernel: IKernel) -> Snapshot:
    """
    (The journal.) The live tasks oldest first, the paused queues, the
    remembered keys, the schedules' state, the shared data, the kept
    outcomes, the groups and the live tasks' checkpoints.
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
        [(task.task_id, task.checkpoint) for task in kernel._live.values() if task.checkpoint],
        list(kernel.dependencies.entries()),
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
    waiting: list[Task] = []
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
            attempts=recovered.attempts,
            extras=Extras(
                key,
                fairness,
                backoff=None
                if recovered.backoff is None
                else taskflow.Backoff._make(recovered.backoff),
                dead=recovered.dead,
                keep_for=recovered.keep_for,
                recovered=True,
                group=recovered.group if kernel.groups.get(recovered.group) else 0,
                trace=recovered.trace,
                checkpoint=recovered.checkpoint,
                after=None if recovered.after is None else _after(*recovered.after),
                deadline=recovered.deadline,
                failures=recovered.failures,
                retries=recovered.retries,
            ),
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
        elif task.after is not None:
            move(task, WAITING)
            waiting.append(task)
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
    # After the tasks they wait for, and the kept outcomes they may have heard.
    kernel.dependencies.restore(waiting, recovery.parents)


def _after(policy: int, group: int, parents: tuple[int, ...]) -> After:
    return After(parents, ParentPolicy(policy), group)


def accepted(kernel: IKernel, tasks: list[Task]) -> None:
    """(The journal.) These waiting tasks' records are durable."""
    producers: dict[Session, None] = {}
    queues: dict[NamedQueue[Task, Session], None] = {}
    held: list[Task] = []  # those that wait for other tasks
    hooks = kernel.hooks
    for task in tasks:
        move(task, WAITING if task.after is not None else DELAYED if task.due else QUEUED)
        task.tally.submitted += 1
        task.home.pending -= 1
        for accepted in hooks.accepted:
            accepted(task)
        producer = task.producer
        if producer is not None:  # None: a schedule's task
            producers[producer] = None  # (its OK: its reply, now that it is accepted)
        for waiting in kernel.duplicates_waiting.pop(task.task_id, ()):
            waiting.reply = waiting.session.speaker.duplicate_ok(task.task_id)
            producers[waiting.session] = None
        if task.deadline:
            kernel.expiry.watch(task)
        if task.after is not None:
            held.append(task)
            continue
        if task.due:
            kernel._delay(task, task.due)
            continue
        if task.home.push(task):
            kernel.fairness_keys += 1
        queues[task.home] = None
    # Every answer of the batch decided first, then each producer's sent once.
    for producer in producers:
        producer.send_decided()
    # Once answered OK: a task that waits may fail at once (by its policy).
    for task in held:
        kernel.dependencies.wait(task)
    for queue in queues:
        if queue.idle:
            kernel.dispatcher.serve_queue(queue)


def refused(kernel: IKernel, tasks: list[Task], reason: str, in_doubt: bool) -> None:
    """
    (The journal.) These waiting tasks' records could not be written.

    Their producers hear ERROR: nothing of them is left in the journal,
    so they never run.  When the journal could not even be cut back
    (C{in_doubt}), a record may survive and run after a restart: then
    their producers are disconnected unanswered, which tells them the
    outcome is unknown, rather than told a lie.
    """
    message = f"journal write failed: {reason}"
    for task in tasks:
        del kernel._live[task.task_id]
        task.home.pending -= 1
        kernel._forget_if_idle(task.home)
        for withdrawn in kernel.hooks.withdrawn:
            withdrawn(task)
        if task.key is not None:
            kernel.keys.drop(task.queue, task.key)
        kernel.pool.free(task.block)
        waiting: list[Session | Duplicate] = [task.producer] if task.producer else []
        waiting += kernel.duplicates_waiting.pop(task.task_id, [])
        for request in waiting:
            session = request if isinstance(request, Session) else request.session
            session.outstanding -= isinstance(request, Session)
            if not session.connected:
                continue
            if in_doubt:
                session.peer.disconnect()
                continue
            kernel.note_rejection(session, ErrorCode.QUEUE_FULL, message, task.task_type, task.size)
            error = session.speaker.error(ErrorCode.QUEUE_FULL, message)
            if isinstance(request, Duplicate):
                request.reply = error
            else:
                # Its ERROR in its place among the answers (a task's reply is
                # its OK once accepted: it keeps none of its own).
                replies = session.replies
                replies[replies.index(task)] = error
            session.send_decided()


def stopping(kernel: IKernel) -> None:
    """
    Say, as the daemon stops, what becomes of the live tasks: the journal
    keeps them, or (without one) they are dropped (announced as such).
    """
    live = len(kernel._live)
    queued, running = kernel.queued, kernel.tasks_running
    if not live:
        kernel.log.info("stopping with no live tasks", log_id="daemon.stopped", queued=0, running=0)
    elif kernel.journal.path is not None:
        kernel.log.info(
            "stopping with {queued} queued and {running} running tasks;"
            " the journal {path} keeps them",
            log_id="daemon.stopped",
            queued=queued,
            running=running,
            path=kernel.journal.path,
        )
    else:
        for dropped in kernel.hooks.dropped:
            for task in kernel._live.values():
                dropped(task, "daemon stopped without a journal")
        kernel.log.warn(
            "stopping with {queued} queued, {delayed} delayed and {running} running tasks;"
            " without a journal they are dropped",
            log_id="daemon.stopped",
            queued=queued,
            delayed=kernel.delays.count,
            running=running,
        )
