"""
The journal's records of protocol v2 part 2: delayed and retrying tasks,
dead letters and their replays, schedule firings and run-time schedules
are written, read back, refused when damaged, and kept by compaction.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quicx.daemon.control import fetch_status
from quicx.daemon.journal import records as journal
from quicx.daemon.journal.interface import DeadInfo
from quicx.daemon.journal.records import JournalCorrupt, RecoveredTask
from quicx.daemon.journal.recovery import recover
from quicx.protocol import admin, outcomes, taskflow
from tests.daemon.journal.test_journal_v2 import framed, write
from tests.fakes import Written
from tests.peer import Peer

T0 = 1795000000.0
BACKOFF = (1, 1000, 60000, 20)


def submit3(task_id: int, due: float = 0.0, retries: int = 0, failures: int = 0) -> bytes:
    task = Written(task_id, b"t", "q", 4, T0, b"k", None, due, retries, failures, BACKOFF)
    return journal.encode_submit3(task, b"p%d" % task_id)


def test_lifecycle_records_come_back(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(
        path,
        submit3(1, due=T0 + 60),
        submit3(2, retries=3),
        journal.encode_retry(2, 1, T0 + 5),
        submit3(3, retries=1),
        journal.encode_retry(3, 1, T0 + 1),
        journal.encode_dead(3, T0 + 9, 2, "boom ☠", "127.0.0.1:5000"),
        submit3(4, retries=1),
        journal.encode_dead(4, T0 + 9, 2, "again", "w"),
        journal.encode_replay(4),
        journal.encode_fired("nightly", T0 + 0.5),
        journal.encode_fired("nightly", T0 + 86400),
        journal.encode_schedule("hourly", b"definition"),
        journal.encode_schedule("gone", b"x"),
        journal.encode_unschedule("gone"),
    )
    recovery = recover(str(path))
    common = {"queue": "q", "priority": 4, "enqueued_at": T0, "key": b"k", "backoff": BACKOFF}
    assert recovery.tasks == (
        RecoveredTask(1, b"t", b"p1", due=T0 + 60, **common),  # type: ignore[arg-type]
        RecoveredTask(2, b"t", b"p2", due=T0 + 5, retries=3, failures=1, attempts=1, **common),  # type: ignore[arg-type]
        RecoveredTask(
            3,
            b"t",
            b"p3",
            retries=1,
            failures=2,
            attempts=2,
            dead=DeadInfo(T0 + 9, "boom ☠", "127.0.0.1:5000"),
            **common,  # type: ignore[arg-type]
        ),
        RecoveredTask(4, b"t", b"p4", retries=1, attempts=2, **common),  # type: ignore[arg-type]
    )
    assert recovery.fired == {"nightly": T0 + 86400}
    assert recovery.schedules == {"hourly": b"definition"}


def test_attempts_are_the_failures_unless_an_attempts_record_says_more(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(
        path,
        submit3(1, retries=3, failures=2),  # a journal written before ATTEMPTS records
        submit3(2, retries=3),
        journal.encode_retry(2, 1, T0 + 5),
        journal.encode_attempts(2, 3),  # two lost workers after its failure
        journal.encode_retry(2, 2, T0 + 9),
        journal.encode_attempts(2, 4),
        submit3(3, retries=1),
        journal.encode_attempts(3, 2),
        journal.encode_dead(3, T0 + 9, 1, "why", "w"),
        journal.encode_attempts(3, 3),
        journal.encode_replay(3),  # its failures reset, not its attempts
        submit3(4),
        journal.encode_attempts(4, 1),
        journal.encode_retry(4, 1, T0),  # failures that are all its attempts: no ATTEMPTS
    )
    attempts = {t.task_id: (t.attempts, t.failures) for t in recover(str(path)).tasks}
    assert attempts == {1: (2, 2), 2: (4, 2), 3: (3, 0), 4: (1, 1)}


def test_a_state_record_of_a_finished_task_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(path, submit3(1), journal.encode_outcome(1, "done"), journal.encode_retry(1, 1, T0))
    assert recover(str(path)).tasks == ()


@pytest.mark.parametrize(
    "record",
    [
        submit3(9, due=T0),
        journal.encode_retry(5, 1, T0),
        journal.encode_dead(5, T0, 1, "why", "who"),
        journal.encode_attempts(5, 2),
        journal.encode_fired("s", T0),
        journal.encode_schedule("s", b"body"),
        journal.encode_unschedule("s"),
    ],
)
def test_a_torn_lifecycle_record_is_a_torn_tail(tmp_path: Path, record: bytes) -> None:
    path = tmp_path / "j"
    path.write_bytes(journal.MAGIC + submit3(5) + record[:-1])
    recovery = recover(str(path))
    assert [t.task_id for t in recovery.tasks] == [5]
    assert recovery.torn_bytes == len(record) - 1


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (bytes([11, 0, 0, 0, 1, 0, 1]), "RETRY record of the wrong length"),
        (bytes([21, 0, 0, 0, 1, 0, 0, 1]), "ATTEMPTS record of the wrong length"),
        (bytes([12, 0, 0, 0, 1]) + bytes(8) + bytes([0, 1, 0, 9, 1]) + b"r", "DEAD record"),
        (bytes([14]) + bytes(8) + bytes([0]), "FIRED record of the wrong shape"),
        (bytes([14]) + bytes(8) + bytes([5]) + b"abc", "FIRED record of the wrong length"),
        (bytes([15, 0, 1]), "SCHEDULE record of the wrong shape"),
        (bytes([16, 1]) + b"ab", "UNSCHEDULE record of the wrong length"),
        (bytes([10, 0, 0, 0, 1, 0]) + bytes(20) + bytes([1, 1, 0, 0, 3]) + b"qt", "wrong shape"),
        (bytes([10, 0, 0, 0, 1, 0]) + bytes(8), "SUBMIT record shorter than its header"),
    ],
)
def test_a_lifecycle_record_of_the_wrong_shape_is_damage(
    tmp_path: Path, body: bytes, problem: str
) -> None:
    path = tmp_path / "j"
    write(path, framed(body), journal.encode_outcome(1, "done"))
    with pytest.raises(JournalCorrupt, match=problem):
        recover(str(path))


def test_compaction_keeps_delayed_retrying_and_dead_tasks(tmp_path: Path, start_daemon) -> None:
    path = tmp_path / "j"
    config = tmp_path / "quicx.conf"
    config.write_text(
        f"[journal]\npath = {path}\nfsync = always\ncompact_factor = 2\ncompact_min_size = 16K\n"
        "[retries]\nretries = 1\nbackoff = fixed:1h\n"
    )
    daemon = start_daemon(f"--config={config}", "--listen=tcp:0:interface=127.0.0.1")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        delayed = producer.request(
            taskflow.encode_submit(b"t", b"later", taskflow.submit_options("q", delay_ms=3_600_000))
        )
        worker.send(taskflow.encode_ready(1, ["q"]))
        worker.receive()  # WAIT
        ids = []
        for payload, permanent in ((b"retrying", False), (b"dead", True)):
            ids.append(
                producer.request(
                    taskflow.encode_submit(b"t", payload, taskflow.submit_options("q"))
                )
            )
            task = worker.receive()
            worker.send(outcomes.encode_nack(task.task_id, task.token, "no", permanent))
            producer.receive()  # RETRYING, or FAILED
        lost = producer.request(
            taskflow.encode_submit(b"t", b"lost", taskflow.submit_options("lost"))
        )
        with Peer(daemon.address) as gone:
            gone.send(taskflow.encode_ready(1, ["lost"]))
            assert gone.receive().task_id == lost.task_id
        deadline = time.monotonic() + 30  # queued again once its worker is seen gone
        while producer.request(admin.encode_inspect(lost.task_id)).document["state"] != "queued":
            assert time.monotonic() < deadline
        for _ in range(400):  # enough finished records to pass 16K and compact
            ok = producer.request(
                taskflow.encode_submit(b"t", b"x" * 40, taskflow.submit_options("q"))
            )
            task = worker.receive()
            worker.send(outcomes.encode_ack(task.task_id, task.token))
            assert producer.receive().task_id == ok.task_id
        # An outcome is not synced on its own (docs/operations.md): this OK comes
        # only once the last DONE before it is synced too.
        options = taskflow.submit_options("barrier")
        barrier = producer.request(taskflow.encode_submit(b"t", b"barrier", options))
        assert isinstance(barrier, taskflow.Ok), barrier
    assert fetch_status(str(daemon.control_path))["journal"]["compactions"] >= 1
    daemon.kill()
    tasks = {t.task_id: t for t in recover(str(path)).tasks}
    retrying, dead = (ok.task_id for ok in ids)
    assert set(tasks) == {delayed.task_id, retrying, dead, lost.task_id, barrier.task_id}
    assert (tasks[lost.task_id].attempts, tasks[retrying].attempts) == (1, 1)
    assert tasks[delayed.task_id].due > 0
    assert (tasks[retrying].failures, tasks[retrying].due > 0) == (1, True)
    died = tasks[dead].dead
    assert died is not None and died.reason == "no"
