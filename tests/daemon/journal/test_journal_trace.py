"""
The journal keeps a task's trace context: a SUBMIT of a traced task is
format 5's record (kind 22), read back with every other field; a damaged
one is refused; a format-4 journal (before traces) still reads, and is
upgraded in place; compaction keeps the trace.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from quicx.daemon.journal import records as journal
from quicx.daemon.journal.records import JournalCorrupt, RecoveredTask
from quicx.daemon.journal.recovery import recover
from quicx.daemon.journal.writer import Journal, _submit_record
from tests.daemon.journal.test_journal_v2 import framed, write
from tests.fakes import Written

T0 = 1795000000.0
TRACE = b"\x00" + bytes(range(1, 17)) + bytes(range(1, 9)) + b"\x01" + b"vendor=1"


def traced(task_id: int, trace: bytes | None = TRACE, **fields: object) -> bytes:
    task = Written(task_id, b"t", "q", 4, T0, b"k", None, trace=trace, **fields)  # type: ignore[arg-type]
    return journal.encode_submit3(task, b"p%d" % task_id)


def test_a_traced_submit_is_format_5s_record_and_comes_back(tmp_path: Path) -> None:
    record = traced(1, retries=2, backoff=(1, 10, 20, 0), keep_for=5.0, group=0)
    assert record[8] == journal.KIND_SUBMIT5
    path = tmp_path / "j"
    write(path, record, traced(2), journal.encode_submit2(3, b"t", b"p3", "q", 4, T0, b"k", None))
    (first, second, third) = recover(str(path)).tasks
    common = {"queue": "q", "priority": 4, "enqueued_at": T0, "key": b"k", "trace": TRACE}
    assert first == RecoveredTask(
        1,
        b"t",
        b"p1",
        retries=2,
        backoff=(1, 10, 20, 0),
        keep_for=5.0,
        **common,  # type: ignore[arg-type]
    )
    assert second == RecoveredTask(2, b"t", b"p2", **common)  # type: ignore[arg-type]
    assert third.trace is None


def test_an_untraced_task_is_written_as_before() -> None:
    def kind(trace: bytes | None, **fields: object) -> int:
        task = Written(1, b"t", "q", 4, T0, trace=trace, **fields)  # type: ignore[arg-type]
        return _submit_record(task, b"p")[8]

    assert kind(None) == journal.KIND_SUBMIT2
    assert kind(None, retries=1) == journal.KIND_SUBMIT3
    assert kind(None, group=1) == journal.KIND_SUBMIT4
    assert kind(TRACE) == kind(TRACE, retries=1) == journal.KIND_SUBMIT5


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda body: body[:-5], "shorter than its fields"),
        (lambda body: body[:43] + b"\x19" + body[44:], "wrong shape"),  # a trace of 25 bytes
    ],
)
def test_a_damaged_traced_submit_is_refused(tmp_path: Path, change, why: str) -> None:
    body = traced(1)[8:]
    assert body[43] == len(TRACE)  # the trace's length, the head's last field
    path = tmp_path / "j"
    write(path, framed(change(body)), traced(2))
    with pytest.raises(JournalCorrupt, match=why):
        recover(str(path))


def test_a_format_4_journal_reads_and_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "j"
    untraced = Written(1, b"t", "q", 4, T0, None, None, group=0, keep_for=3.0)
    write(path, journal.encode_submit3(untraced, b"p"), magic=journal.MAGIC_V4)
    assert recover(str(path)).format == 4
    writer = Journal(str(path), journal.FsyncPolicy.ALWAYS, Clock())
    writer.open(recover(str(path)))
    again = recover(str(path))
    assert (again.format, [(t.task_id, t.keep_for, t.trace) for t in again.tasks]) == (
        journal.FORMAT,
        [(1, 3.0, None)],
    )
    assert path.read_bytes()[:8] == journal.MAGIC
    assert struct.unpack(">B", path.read_bytes()[16:17]) == (journal.KIND_SUBMIT4,)
