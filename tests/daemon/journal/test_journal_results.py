"""
The journal's records of part 3: a SUBMIT that keeps its outcome or joins a
group, RESULT (kept and forgotten outcomes) and GROUP.  A group's counts are
its last GROUP record's, moved on by the members that join or finish after
it -- each member counted once, a dead one when it dies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quicx.daemon.journal import records as journal
from quicx.daemon.journal.interface import GroupEntry, KeptEntry
from quicx.daemon.journal.records import JournalCorrupt, RecoveredTask
from quicx.daemon.journal.recovery import recover
from quicx.protocol.outcomes import GroupPhase, OutcomeState
from tests.fakes import Written

T = 1_800_000_000.0


def write(path: Path, *records: bytes) -> None:
    path.write_bytes(journal.MAGIC + b"".join(records))


def submit(task_id: int, group: int = 0, keep_for: float = 0.0, retries: int = 0) -> bytes:
    task = Written(task_id, b"t", "q", 0, T, retries=retries, keep_for=keep_for, group=group)
    return journal.encode_submit3(task, b"p")


def group(group_id: int, phase: GroupPhase, members: int = 0, *counts: int) -> bytes:
    return journal.encode_group(GroupEntry(group_id, phase, T, 0.0, members, *counts))


def test_members_move_their_groups_counts_on_once_each(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(
        path,
        group(1, GroupPhase.OPEN),
        submit(1, group=1, keep_for=60.5),
        submit(2, group=1),
        submit(3, group=1, retries=1),
        submit(4, group=1),
        journal.encode_outcome(1, "done"),
        journal.encode_result(KeptEntry(1, OutcomeState.DONE, 3, T + 60.5, b"[1]")),
        journal.encode_dead(3, T, 1, "bad", "w"),
        journal.encode_outcome(3, "failed"),  # the dead task dropped: counted already
        journal.encode_outcome(4, "cancelled"),
        group(1, GroupPhase.CLOSED, 4, 1, 1, 1),
        group(2, GroupPhase.OPEN),
        group(2, GroupPhase.UNKNOWN),
    )
    recovery = recover(str(path))
    assert recovery.tasks == (RecoveredTask(2, b"t", b"p", "q", 0, T, due=0.0, group=1),)
    assert recovery.groups == (GroupEntry(1, GroupPhase.CLOSED, T, 0.0, 4, 1, 1, 1),)
    assert recovery.kept == (KeptEntry(1, OutcomeState.DONE, 3, T + 60.5, b"[1]"),)
    assert recovery.last_group_id == 2


def test_a_snapshots_members_come_before_their_groups_and_count_after(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(
        path,
        # A compaction writes the live members first, then the groups' counts.
        submit(7, group=3, keep_for=5.0),
        submit(8, group=3),
        group(2, GroupPhase.UNKNOWN),  # the id counter, after forgotten groups
        group(3, GroupPhase.CLOSED, 5, 2, 1, 0),
        journal.encode_forgotten(4),
        # Appended after it:
        journal.encode_outcome(7, "done"),
    )
    recovery = recover(str(path))
    assert recovery.groups == (GroupEntry(3, GroupPhase.CLOSED, T, 0.0, 5, 3, 1, 0),)
    assert [(t.task_id, t.keep_for, t.group) for t in recovery.tasks] == [(8, 0.0, 3)]
    assert (recovery.forgotten, recovery.last_group_id) == ((4,), 3)


def test_a_later_result_replaces_a_kept_outcome_and_a_forgotten_one_ends_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j"
    write(
        path,
        journal.encode_result(KeptEntry(5, OutcomeState.DEAD, 0, T + 1, b"why")),
        journal.encode_result(KeptEntry(6, OutcomeState.FAILED, 0, T + 1, b"no")),
        journal.encode_result(KeptEntry(5, OutcomeState.DONE, 1, T + 2, b"\x00")),
        journal.encode_forgotten(6),
    )
    recovery = recover(str(path))
    assert recovery.kept == (KeptEntry(5, OutcomeState.DONE, 1, T + 2, b"\x00"),)
    assert recovery.forgotten == (6,)


def test_kept_for_nobody_and_evicted_come_back_as_such(tmp_path: Path) -> None:
    path = tmp_path / "j"
    automatic = KeptEntry(5, OutcomeState.DONE, 2, T + 1, b"ok", automatic=True)
    write(
        path,
        journal.encode_result(automatic),
        journal.encode_result(KeptEntry(6, OutcomeState.DONE, 1, T + 1, b"\x01")),
        journal.encode_result(KeptEntry(7, OutcomeState.FAILED, 0, T + 1, b"no", True)),
        journal.encode_forgotten(7, evicted=True),
        journal.encode_result(KeptEntry(8, OutcomeState.FAILED, 0, T + 1, b"no")),
        journal.encode_forgotten(8),
    )
    recovery = recover(str(path))
    assert recovery.kept == (automatic, KeptEntry(6, OutcomeState.DONE, 1, T + 1, b"\x01"))
    assert (recovery.forgotten, recovery.evicted) == ((7, 8), frozenset({7}))


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (journal.encode_result(KeptEntry(1, 0, 0, T, b"")), "RESULT record of the wrong shape"),
        (
            journal._frame(bytes([17, 0, 0, 0, 1, 5, 2]) + bytes(8)),
            "RESULT record of the wrong shape",
        ),
        (
            journal._frame(bytes([17, 0, 0, 0, 1, 1, 0x84]) + bytes(8)),
            "RESULT record of the wrong shape",
        ),
        (journal.encode_result(KeptEntry(1, 1, 4, T, b"")), "RESULT record of the wrong shape"),
        (journal.encode_forgotten(1)[:-1], "RESULT record shorter than its header"),
        (group(1, GroupPhase.OPEN)[:-1], "GROUP record of the wrong shape"),
    ],
)
def test_a_malformed_record_is_damage(tmp_path: Path, record: bytes, problem: str) -> None:
    # Framed anew: whole in length, good checksum, a bad body.
    body = record[journal.RECORD_HEADER.size :]
    path = tmp_path / "j"
    write(path, journal._frame(body), journal.encode_reserve(9))
    with pytest.raises(JournalCorrupt, match=problem):
        recover(str(path))
