"""
Waiting tasks survive a crash (docs/operations.md, records 23 and 24): a
daemon with C{fsync = always} is killed with SIGKILL while a diamond and a
chord are half done; after the restart no waiting task is lost, none is
released twice, and those whose parents finished before the crash are due.
Then every earlier moment of the same journal (each prefix of its records,
and a torn record) is restored in-process and checked the same way.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import cast

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from quicx.daemon.journal.records import (
    KIND_CANCELLED,
    KIND_DEAD,
    KIND_DONE,
    KIND_FAILED,
    KIND_SUBMIT6,
    MAGIC,
    RECORD_HEADER,
    SUBMIT6_HEAD,
    FsyncPolicy,
)
from quicx.daemon.journal.recovery import recover
from quicx.daemon.journal.writer import Journal
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.state import DELAYED, QUEUED, WAITING
from quicx.protocol import admin, codec, outcomes, taskflow
from quicx.protocol.parents import parents_in
from quicx.protocol.start_options import Expires
from tests.fakes import FakeJournal, make_queue, submit_to, v2_producer_of, v2_worker_of
from tests.peer import Peer


def submit(peer: Peer, payload: bytes, **options: object) -> int:
    reply = peer.request(
        taskflow.encode_submit(b"t", payload, taskflow.submit_options("work", **options))
    )
    assert isinstance(reply, taskflow.Ok), reply
    return reply.task_id


def ack(worker: Peer, task: taskflow.Task, text: str) -> None:
    result = taskflow.Result(taskflow.ResultKind.TEXT, text.encode())
    worker.send(outcomes.encode_ack(task.task_id, task.token, result))


def run(worker: Peer, expected: int, text: str) -> taskflow.Task:
    task = worker.receive()
    assert isinstance(task, taskflow.Task) and task.task_id == expected, task
    ack(worker, task, text)
    return task


def test_waiting_tasks_survive_kill_9_and_the_due_ones_run(tmp_path: Path, start_daemon) -> None:
    journal = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    with Peer(daemon.address) as producer:
        a = submit(producer, b"a")
        b = submit(producer, b"b", after=(a,))
        c = submit(producer, b"c", after=(a,))
        d = submit(producer, b"d", after=(b, c))
        group = producer.request(outcomes.encode_group(outcomes.GroupOp.OPEN)).document["group"]
        members = [submit(producer, b"m", group=group) for _ in range(2)]
        chord = submit(producer, b"chord", after_group=group)
        with Peer(daemon.address) as worker:
            worker.send(taskflow.encode_ready(1, ["work"]))
            run(worker, a, "from a")
            run(worker, members[0], "m0")
            run(worker, members[1], "m1")
            run(worker, b, "from b")
            got = worker.receive()  # c: taken, never finished
            assert isinstance(got, taskflow.Task) and got.task_id == c
            for _ in range(4):  # every DONE is synced once its producer hears it
                assert isinstance(producer.receive(), taskflow.Done)
            # Closed: the group finishes, its callback is due.
            producer.request(outcomes.encode_group(outcomes.GroupOp.CLOSE, group))
    with Peer(str(daemon.control_path)) as control:
        # A PAUSE's answer waits until every record before it is synced.
        control.request(admin.encode_queue_action(codec.MessageType.PAUSE, "elsewhere"))
    before_kill = Path(journal).read_bytes()
    daemon.kill()
    check_every_moment(before_kill, tmp_path)

    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as client:
        waiting = client.request(admin.encode_inspect(d)).document
        assert waiting["state"] == "waiting" and waiting["why"][0]["parents"] == [c]
        with Peer(restarted.address) as worker:
            worker.send(taskflow.encode_ready(1, ["work"]))
            seen = {}
            for _ in range(3):
                task = worker.receive()
                assert isinstance(task, taskflow.Task)
                seen[task.task_id] = task
                ack(worker, task, "from " + task.payload.decode())
            assert set(seen) == {c, chord, d}
            assert worker.nothing_for(0.3)  # none twice
    by_chord = seen[chord].parents
    assert by_chord is not None and by_chord.group is not None
    assert (by_chord.group.members, by_chord.group.done) == (2, 2)
    assert sorted(o.data for o in by_chord.outcomes) == [b"m0", b"m1"]
    by_d = seen[d].parents
    assert by_d is not None
    assert {o.task_id: o.data for o in by_d.outcomes} == {b: b"from b", c: b"from c"}


def test_a_parent_that_expired_is_heard_again_after_kill_9(tmp_path: Path, start_daemon) -> None:
    """A PARENT record of an expired parent (state 7) is read back, and handed on."""
    journal = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    with Peer(daemon.address) as producer:
        late = submit(producer, b"late", expires=Expires(300))
        other = submit(producer, b"other")
        child = submit(producer, b"child", after=(late, other), on_parent_failure=2)
        assert isinstance(producer.receive(), outcomes.Outcome)  # late expired
    with Peer(str(daemon.control_path)) as control:
        # A PAUSE's answer waits until every record before it is synced.
        control.request(admin.encode_queue_action(codec.MessageType.PAUSE, "elsewhere"))
    daemon.kill()
    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(1, ["work"]))
        run(worker, other, "from other")
        task = worker.receive()
        assert isinstance(task, taskflow.Task) and task.task_id == child, task
    assert task.parents is not None
    heard = {o.task_id: o.state for o in task.parents.outcomes}
    assert heard == {late: outcomes.OutcomeState.EXPIRED, other: outcomes.OutcomeState.DONE}


def records(data: bytes) -> list[int]:
    """Each whole record's end offset, in order."""
    ends, offset = [], len(MAGIC)
    while offset + RECORD_HEADER.size <= len(data):
        length, _ = RECORD_HEADER.unpack_from(data, offset)
        offset += RECORD_HEADER.size + length
        ends.append(offset)
    return ends


def read_back(data: bytes) -> tuple[dict[int, tuple[int, ...]], set[int]]:
    """The waiting tasks' parents (SUBMIT6 records), and the ids with an outcome record."""
    children: dict[int, tuple[int, ...]] = {}
    ended: set[int] = set()
    offset = len(MAGIC)
    while offset + RECORD_HEADER.size <= len(data):
        length, checksum = RECORD_HEADER.unpack_from(data, offset)
        body = data[offset + RECORD_HEADER.size : offset + RECORD_HEADER.size + length]
        offset += RECORD_HEADER.size + length
        if len(body) < length or zlib.crc32(body) != checksum:
            break
        kind, task_id = body[0], struct.unpack_from(">I", body, 1)[0]
        if kind == KIND_SUBMIT6:
            head = SUBMIT6_HEAD.unpack_from(body)
            count = head[-1]
            fields = sum(head[9:15])
            at = SUBMIT6_HEAD.size + fields
            children[task_id] = struct.unpack_from(f">{count}I", body, at)
        elif kind in (KIND_DONE, KIND_FAILED, KIND_CANCELLED, KIND_DEAD):
            ended.add(task_id)
    return children, ended


def check_every_moment(data: bytes, tmp_path: Path) -> None:
    """Each prefix of a journal (and each torn last record) restored: a restart at that moment."""
    ends = records(data)
    assert len(ends) >= 20
    for cut in sorted({*ends, *(end - 3 for end in ends)}):
        prefix = data[:cut]
        path = tmp_path / f"j{cut}"
        path.write_bytes(prefix)
        children, ended = read_back(prefix)
        queue = make_queue(journal=FakeJournal(waits=False))
        queue.restore(recover(str(path)))
        for child, parents in children.items():
            if child in ended:
                continue
            task = queue._live.get(child)
            assert task is not None, f"{cut}: waiting task {child} lost"
            if not parents:
                continue  # a group's callback: due once its group finished
            if all(p in ended for p in parents):
                assert task.state in (QUEUED, DELAYED), f"{cut}: {child} not released"
                assert task.parents is not None
                carried = parents_in(task.parents, 0, len(task.parents))
                assert carried is not None
                assert {o.task_id for o in carried.outcomes} == set(parents), (cut, child)
            else:
                assert task.state is WAITING, f"{cut}: {child} released early"


async def accepted(queue: QueueService, task_id: int) -> None:
    while not queue._live[task_id].accepted:
        await deferLater(reactor, 0.01, lambda: None)


@pytest_twisted.ensureDeferred
async def test_a_released_task_keeps_its_parents_outcomes_through_compaction(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "j")
    written = Journal(path, FsyncPolicy.ALWAYS, reactor)
    queue = make_queue(journal=cast(FakeJournal, written))
    written.open(recover(path))
    written.startService()
    try:
        producer = v2_producer_of(queue)
        submit_to(queue, producer.session, b"t", b"p", "work")
        await accepted(queue, 1)
        submit_to(queue, producer.session, b"t", b"c", "parked", after=(1,))
        await accepted(queue, 2)
        worker = v2_worker_of(queue, queues=("work",))
        (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
        result = taskflow.Result(taskflow.ResultKind.TEXT, b"from the parent")
        queue.ack(worker.session, task.task_id, task.token, result)
        assert queue.task(2).state is QUEUED  # released, not yet run
        written.compact_factor, written.compact_min_size = 0.0, 0  # the next flush compacts
        queue.set_paused("elsewhere", True)
        while not written.stats.compactions:
            await deferLater(reactor, 0.01, lambda: None)
    finally:
        await written.stopService()
    restored = make_queue(journal=FakeJournal(waits=False))
    restored.restore(recover(path))
    child = restored.task(2)
    assert child.state is QUEUED and child.parents is not None
    carried = parents_in(child.parents, 0, len(child.parents))
    assert carried is not None
    assert [(o.task_id, o.state, o.data) for o in carried.outcomes] == [(1, 1, b"from the parent")]
