"""
The journal's version-2 records: queues, priorities, keys, cancels and
pauses are written, read back, kept by compaction; the previous release's
journal (a file committed here, never regenerated) still recovers and is
upgraded in place.
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from quicx.daemon.control import fetch_status
from quicx.daemon.journal import records as journal
from quicx.daemon.journal.interface import KeyEntry
from quicx.daemon.journal.records import JournalCorrupt, RecoveredTask
from quicx.daemon.journal.recovery import recover
from quicx.daemon.journal.writer import Journal
from quicx.protocol import admin, codec, link, outcomes, taskflow, wire
from tests.peer import Peer

V1_JOURNAL = Path(__file__).parents[2] / "data" / "journal-v1.qj"


def write(path: Path, *records: bytes, magic: bytes = journal.MAGIC) -> None:
    path.write_bytes(magic + b"".join(records))


def test_version_2_records_come_back(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(
        path,
        journal.encode_submit2(1, b"mail", b"one", "mail", 9, 1795000000.5, b"k1", b"acme"),
        journal.encode_submit2(2, b"mail", b"", "mail", 0, 1795000001.0, None, None),
        journal.encode_submit(3, b"old", b"three"),
        journal.encode_submit2(4, b"sms", b"four", "sms", 3, 1795000002.0, b"k4", None),
        journal.encode_outcome(4, "cancelled"),
        journal.encode_pause("mail", True),
        journal.encode_pause("sms", True),
        journal.encode_pause("sms", False),
        journal.encode_pause("video", True),
        journal.encode_pause("video", False),
        journal.encode_pause("video", True),
        journal.encode_key("video", b"k9", 9, 1795000003.25, "done"),
    )
    recovery = recover(str(path))
    assert recovery.tasks == (
        RecoveredTask(1, b"mail", b"one", "mail", 9, 1795000000.5, b"k1", b"acme"),
        RecoveredTask(2, b"mail", b"", "mail", 0, 1795000001.0),
        RecoveredTask(3, b"old", b"three"),
    )
    assert recovery.paused == frozenset({"mail", "video"})
    assert set(recovery.keys) == {
        KeyEntry("sms", b"k4", 4, 1795000002.0, "cancelled"),
        KeyEntry("video", b"k9", 9, 1795000003.25, "done"),
    }
    assert recovery.format == journal.FORMAT


@pytest.mark.parametrize(
    "record",
    [
        journal.encode_submit2(1, b"t", b"x", "q", 1, 1.0, b"k", None),
        journal.encode_pause("q", True),
        journal.encode_key("q", b"k", 1, 1.0, "done"),
    ],
)
def test_a_torn_version_2_record_is_a_torn_tail(tmp_path: Path, record: bytes) -> None:
    path = tmp_path / "j"
    whole = journal.encode_submit2(5, b"t", b"kept", "q", 1, 1.0, None, None)
    path.write_bytes(journal.MAGIC + whole + record[:-2])
    recovery = recover(str(path))
    assert [t.task_id for t in recovery.tasks] == [5]
    assert recovery.torn_bytes == len(record) - 2


def framed(body: bytes) -> bytes:
    """A record around C{body}, its length and checksum right."""
    return len(body).to_bytes(4, "big") + zlib.crc32(body).to_bytes(4, "big") + body


def test_the_version_2_layouts_byte_by_byte() -> None:
    # The layouts docs/operations.md gives: every fixed-size field first.
    assert journal.encode_submit2(
        7, b"mail", b"PAY", "q1", 5, 1795000000.25, b"k", b"fk"
    ) == framed(
        bytes([6, 0, 0, 0, 7, 5])
        + (1795000000250).to_bytes(8, "big")
        + bytes([2, 4, 1, 2])
        + b"q1mailkfkPAY"
    )
    assert journal.encode_submit2(7, b"t", b"", "q", 0, 0.0, None, None) == framed(
        bytes([6, 0, 0, 0, 7, 0]) + bytes(8) + bytes([1, 1, 0, 0]) + b"qt"
    )
    assert journal.encode_outcome(9, "cancelled") == framed(bytes([7, 0, 0, 0, 9]))
    assert journal.encode_pause("q1", True) == framed(bytes([8, 1, 2]) + b"q1")
    assert journal.encode_key("q1", b"abc", 9, 2.5, "failed") == framed(
        bytes([9, 0, 0, 0, 9]) + (2500).to_bytes(8, "big") + bytes([2, 2, 3]) + b"q1abc"
    )


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (bytes([8, 1, 40]) + b"queue", "PAUSE record of the wrong shape"),
        (bytes([8, 2, 5]) + b"queue", "PAUSE record of the wrong shape"),
        (bytes([8, 1, 0]), "PAUSE record of the wrong shape"),
        (bytes([6, 0, 0, 0, 1, 0]) + bytes(8) + bytes([1, 1, 9, 0]) + b"qt", "shorter than its"),
        (bytes([6, 0, 0, 0, 1, 0]) + bytes(8) + bytes([0, 1, 0, 0]) + b"t", "shorter than its"),
        (bytes([6, 0, 0, 0, 1, 0]) + bytes(6), "SUBMIT record shorter than its header"),
        (bytes([9, 0, 0, 0, 1]) + bytes(8) + bytes([4, 1, 1]) + b"qk", "KEY record of the wrong"),
        (bytes([9, 0, 0, 0, 1]) + bytes(8) + bytes([1, 1, 1]) + b"qk!", "KEY record of the wrong"),
        (bytes([9, 0, 0, 0, 1]) + bytes(8) + bytes([1, 1, 0]) + b"q", "KEY record of the wrong"),
    ],
)
def test_a_record_of_the_wrong_shape_is_damage_not_a_tear(
    tmp_path: Path, body: bytes, problem: str
) -> None:
    # Whole in length and checksum, wrong inside: damage, even as the last record.
    for after in ((), (journal.encode_outcome(1, "done"),)):
        path = tmp_path / "j"
        write(path, framed(body), *after)
        with pytest.raises(JournalCorrupt, match=problem):
            recover(str(path))


def test_a_live_tasks_key_is_its_own(tmp_path: Path) -> None:
    # Task 1's key was remembered, then left the table early (max_dedup_keys):
    # task 2 took the key and is live.  After a restart a duplicate of the
    # key must find task 2, not task 1's outcome.
    path = tmp_path / "j"
    write(
        path,
        journal.encode_submit2(1, b"t", b"", "q", 0, 10.0, b"k", None),
        journal.encode_outcome(1, "done"),
        journal.encode_key("q", b"k2", 3, 9.0, "done"),
        journal.encode_submit2(2, b"t", b"", "q", 0, 20.0, b"k", None),
        journal.encode_submit2(4, b"t", b"", "q", 0, 20.0, b"k2", None),
        journal.encode_submit2(5, b"t", b"", "other", 0, 20.0, b"k3", None),
        journal.encode_outcome(5, "failed"),
    )
    recovery = recover(str(path))
    assert [t.task_id for t in recovery.tasks] == [2, 4]
    assert recovery.keys == (KeyEntry("other", b"k3", 5, 20.0, "failed"),)


def test_a_journal_of_a_newer_format_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "j"
    path.write_bytes(b"QUICXJ7\n")
    with pytest.raises(JournalCorrupt, match=r"newer Quicx \(journal format 7\)"):
        recover(str(path))


def test_the_previous_releases_journal_recovers(tmp_path: Path) -> None:
    recovery = recover(str(V1_JOURNAL))
    assert recovery.format == 1
    assert [(t.task_id, t.task_type, t.payload) for t in recovery.tasks] == [
        (1, b"send_email", b'{"to":"a@example.com"}'),
        (4, b"report", b""),
    ]
    assert all(
        (t.queue, t.priority, t.enqueued_at, t.key, t.fairness) == (None,) * 5
        for t in recovery.tasks
    )
    assert (recovery.paused, recovery.keys) == (frozenset(), ())
    assert recovery.last_task_id == 65536


def test_opening_the_previous_format_upgrades_the_file_in_place(tmp_path: Path) -> None:
    path = tmp_path / "j"
    shutil.copy(V1_JOURNAL, path)
    writer = Journal(str(path), journal.FsyncPolicy.ALWAYS, Clock())
    writer.open(recover(str(path)))
    assert path.read_bytes().startswith(journal.MAGIC)
    again = recover(str(path))
    assert again.format == journal.FORMAT
    assert [t.task_id for t in again.tasks] == [1, 4]
    assert not list(tmp_path.glob("j.*")), "the temporary file was left behind"


def test_a_daemon_starts_on_the_previous_releases_journal(tmp_path: Path, start_daemon) -> None:
    path = tmp_path / "j"
    shutil.copy(V1_JOURNAL, path)
    daemon = start_daemon(f"--journal={path}")
    assert f"upgraded to format {journal.FORMAT}" in daemon.log()
    with Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(2))
        tasks = [worker.receive(), worker.receive()]
    assert [(t.task_id, t.queue, t.priority) for t in tasks] == [
        (1, "default", 0),
        (4, "default", 0),
    ]


def test_compaction_keeps_queues_pauses_and_keys(tmp_path: Path, start_daemon) -> None:
    path = tmp_path / "j"
    config = tmp_path / "quicx.conf"
    config.write_text(
        f"[journal]\npath = {path}\nfsync = always\ncompact_factor = 2\ncompact_min_size = 16K\n"
    )
    daemon = start_daemon(f"--config={config}", "--listen=tcp:0:interface=127.0.0.1")
    with Peer(str(daemon.control_path)) as control:
        control.request(admin.encode_queue_action(codec.MessageType.PAUSE, "held"))
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        kept = producer.request(
            taskflow.encode_submit(b"t", b"kept", taskflow.submit_options("held", 7, b"live-key"))
        )
        assert worker.request(taskflow.encode_ready(64, ["churn"])) == wire.Wait()
        for n in range(400):  # enough finished records to pass 16K and compact
            ok = producer.request(
                taskflow.encode_submit(
                    b"t", b"x" * 40, taskflow.submit_options("churn", key=b"k%d" % n)
                )
            )
            task = worker.receive()
            worker.send(outcomes.encode_ack(task.task_id, task.token))
            assert producer.receive().task_id == ok.task_id
    with Peer(str(daemon.control_path)) as control:
        # A no-op (held is paused): its answer waits until the last DONE, not synced
        # on its own (docs/operations.md), is synced too.
        again = control.request(admin.encode_queue_action(codec.MessageType.PAUSE, "held"))
        assert again == link.Info({"queue": "held", "paused": True})
    assert fetch_status(str(daemon.control_path))["journal"]["compactions"] >= 1
    daemon.kill()
    recovery = recover(str(path))
    assert recovery.paused == frozenset({"held"})
    assert [(t.task_id, t.queue, t.priority, t.key) for t in recovery.tasks] == [
        (kept.task_id, "held", 7, b"live-key")
    ]
    assert {k.key for k in recovery.keys} >= {b"k0", b"k399"}
    assert path.read_bytes()[:8] == journal.MAGIC
