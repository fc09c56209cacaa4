"""
The journal's records of debounce and expiry (kinds 25 DEADLINE and 26
REPLACE): written, read back, refused when damaged, and kept by compaction.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quicx.daemon.control import fetch_status
from quicx.daemon.journal import records as journal
from quicx.daemon.journal.interface import KeyEntry
from quicx.daemon.journal.records import JournalCorrupt
from quicx.daemon.journal.recovery import recover
from quicx.protocol import outcomes, taskflow
from quicx.protocol.start_options import Debounce, DebounceMode, Expires
from quicx.protocol.taskflow import SubmitOptions
from tests.daemon.journal.test_journal_v2 import framed, write
from tests.fakes import Written
from tests.peer import Peer

T0 = 1795000000.0


def submit3(task_id: int, key: bytes | None = None) -> bytes:
    task = Written(task_id, b"t", "q", 4, T0, key, None, T0 + 60, 0, 0, None)
    return journal.encode_submit3(task, b"p%d" % task_id)


def test_deadlines_replacements_and_expiries_come_back(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(
        path,
        submit3(1),
        journal.encode_deadline(1, T0 + 30),
        journal.encode_replace(1, T0 + 90, b"newer"),
        journal.encode_replace(1, T0 + 120, b"newest"),
        submit3(2, key=b"k"),
        journal.encode_deadline(2, T0 + 30),
        journal.encode_outcome(2, "expired"),
        journal.encode_replace(9, T0, b"of no live task"),
        journal.encode_deadline(9, T0),
    )
    recovery = recover(str(path))
    (task,) = recovery.tasks
    assert (task.task_id, task.payload, task.due, task.deadline) == (
        1,
        b"newest",
        T0 + 120,
        T0 + 30,
    )
    assert recovery.keys == (KeyEntry("q", b"k", 2, T0, "expired"),)


@pytest.mark.parametrize(
    "record", [journal.encode_deadline(5, T0), journal.encode_replace(5, T0, b"x")]
)
def test_a_torn_record_is_a_torn_tail(tmp_path: Path, record: bytes) -> None:
    path = tmp_path / "j"
    path.write_bytes(journal.MAGIC + submit3(5) + record[: 8 + 13 - 1])
    recovery = recover(str(path))
    assert [t.payload for t in recovery.tasks] == [b"p5"]
    assert recovery.torn_bytes == 8 + 13 - 1


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (bytes([25, 0, 0, 0, 1]) + bytes(7), "DEADLINE record of the wrong length"),
        (bytes([25, 0, 0, 0, 1]) + bytes(9), "DEADLINE record of the wrong length"),
        (bytes([26, 0, 0, 0, 1]) + bytes(7), "REPLACE record shorter than its header"),
    ],
)
def test_a_record_of_the_wrong_shape_is_damage(tmp_path: Path, body: bytes, problem: str) -> None:
    path = tmp_path / "j"
    write(path, framed(body), journal.encode_outcome(1, "done"))
    with pytest.raises(JournalCorrupt, match=problem):
        recover(str(path))


def test_compaction_keeps_deadlines_and_the_newest_payload(tmp_path: Path, start_daemon) -> None:
    path = tmp_path / "j"
    config = tmp_path / "quicx.conf"
    config.write_text(
        f"[journal]\npath = {path}\nfsync = always\ncompact_factor = 2\ncompact_min_size = 16K\n"
    )
    daemon = start_daemon(f"--config={config}", "--listen=tcp:0:interface=127.0.0.1")

    def submit(peer: Peer, payload: bytes, **options: object) -> taskflow.Ok:
        options.setdefault("queue", "q")
        encoded = SubmitOptions(**options).encode()  # type: ignore[arg-type]
        reply = peer.request(taskflow.encode_submit(b"t", payload, encoded))
        assert isinstance(reply, taskflow.Ok), reply
        return reply

    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        held = submit(
            producer, b"old", key=b"k", debounce=Debounce(DebounceMode.REPLACE, 3_600_000)
        )
        submit(producer, b"new", key=b"k", debounce=Debounce(DebounceMode.REPLACE, 3_600_000))
        expiring = submit(producer, b"e", queue="other", expires=Expires(3_600_000))
        worker.send(taskflow.encode_ready(1, ["q"]))
        worker.receive()  # WAIT
        for _ in range(400):  # enough finished records to pass 16K and compact
            ok = submit(producer, b"x" * 40)
            task = worker.receive()
            worker.send(outcomes.encode_ack(task.task_id, task.token))
            assert producer.receive().task_id == ok.task_id
        submit(producer, b"barrier", queue="barrier")
    assert fetch_status(str(daemon.control_path))["journal"]["compactions"] >= 1
    daemon.kill()
    tasks = {t.task_id: t for t in recover(str(path)).tasks}
    assert tasks[held.task_id].payload == b"new"
    assert tasks[expiring.task_id].deadline > T0
