"""
The journal's SHARED records (kind 18): each version of a shared name is
written, read back (the last one of each name wins, a deletion forgets it),
cut when torn and refused when damaged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quicx.daemon.journal import records as journal
from quicx.daemon.journal.records import JournalCorrupt
from quicx.daemon.journal.recovery import recover
from tests.daemon.journal.test_journal_v2 import framed, write


def test_the_shared_layout_byte_by_byte() -> None:
    # The layout docs/operations.md gives.
    assert journal.encode_shared("model", 258, b"DATA") == framed(
        bytes([18, 0, 0, 1, 2, 5]) + b"model" + b"DATA"
    )
    assert journal.encode_shared("m", 0, b"") == framed(bytes([18, 0, 0, 0, 0, 1]) + b"m")


def test_the_last_version_of_each_name_comes_back_and_a_deletion_forgets_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j"
    write(
        path,
        journal.encode_shared("model", 1, b"one"),
        journal.encode_submit2(1, b"t", b"p", "q", 0, 1795000000.0, None, None),
        journal.encode_shared("model", 2, b"two"),
        journal.encode_shared("table", 1, b""),
        journal.encode_shared("gone", 1, b"x"),
        journal.encode_shared("gone", 0, b""),
        journal.encode_shared("again", 3, b"3"),
        journal.encode_shared("again", 0, b""),
        journal.encode_shared("again", 1, b"new"),
    )
    recovery = recover(str(path))
    assert recovery.shared == {"model": (2, b"two"), "table": (1, b""), "again": (1, b"new")}
    assert [t.task_id for t in recovery.tasks] == [1]
    assert recovery.records == 9


def test_a_torn_shared_record_is_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "j"
    record = journal.encode_shared("model", 2, b"x" * 100)
    write(path, journal.encode_shared("model", 1, b"kept"), record[:-1])
    recovery = recover(str(path))
    assert recovery.shared == {"model": (1, b"kept")}
    assert recovery.torn_bytes == len(record) - 1


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (bytes([18, 0, 0, 0, 1]), "SHARED record of the wrong shape"),
        (bytes([18, 0, 0, 0, 1, 0]), "SHARED record of the wrong shape"),
        (bytes([18, 0, 0, 0, 1, 9]) + b"abc", "SHARED record of the wrong length"),
        (bytes([18, 0, 0, 0, 0, 1]) + b"a" + b"data", "SHARED record of the wrong length"),
    ],
)
def test_a_shared_record_of_the_wrong_shape_is_damage(
    tmp_path: Path, body: bytes, problem: str
) -> None:
    path = tmp_path / "j"
    write(path, framed(body), journal.encode_shared("ok", 1, b""))
    with pytest.raises(JournalCorrupt, match=problem):
        recover(str(path))


def test_the_largest_version_fits_one_record(tmp_path: Path) -> None:
    path = tmp_path / "j"
    data = b"d" * journal.MAX_SHARED_DATA
    write(path, journal.encode_shared("n" * 64, 7, data))
    assert recover(str(path)).shared == {"n" * 64: (7, data)}
