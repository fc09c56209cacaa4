"""Reading a journal back: what survives a crash, and repairing a damaged file."""

from __future__ import annotations

import os
import time
import zlib

from attrs import frozen

from quicx.daemon.journal.records import (
    ID,
    KIND_CHECKPOINT,
    KIND_RESERVE,
    KIND_SUBMIT,
    KINDS,
    MAGIC,
    MAX_BODY,
    RECORD_HEADER,
    SUBMIT_HEAD,
    JournalCorrupt,
    RecoveredTask,
    Recovery,
)


def _record_at(data: bytes | memoryview, offset: int) -> tuple[int, str]:
    """
    Check the record at C{offset}: its end offset and C{""}, or what is wrong.
    """
    end_of_data = len(data)
    if offset + RECORD_HEADER.size > end_of_data:
        return end_of_data, "incomplete record header"
    length, checksum = RECORD_HEADER.unpack_from(data, offset)
    body_start = offset + RECORD_HEADER.size
    end = body_start + length
    if not 5 <= length <= MAX_BODY:
        return end, f"impossible record length {length}"
    if end > end_of_data:
        return end, f"record of {length} bytes runs past the end of the file"
    if zlib.crc32(data[body_start:end]) != checksum:
        return end, "checksum mismatch"
    kind = data[body_start]
    if kind not in KINDS:
        return end, f"unknown record kind {kind}"
    if kind == KIND_SUBMIT and (
        length < SUBMIT_HEAD.size or SUBMIT_HEAD.size + data[body_start + 5] > length
    ):
        return end, "SUBMIT record shorter than its task type"
    if kind != KIND_SUBMIT and length != 5:
        return end, f"record of kind {kind} has {length} bytes, not 5"
    return end, ""


def _good_record_after(data: bytes, offset: int) -> int | None:
    """The offset of the first whole, good record after C{offset}, if any."""
    view = memoryview(data)
    for candidate in range(offset + 1, len(data) - RECORD_HEADER.size):
        if not _record_at(view, candidate)[1]:
            return candidate
    return None


def _is_torn(data: bytes, offset: int, end: int) -> bool:
    """
    Whether the bad record at C{offset} (ending at C{end}) is a torn tail: cut
    short by a crash (it runs past the end of the file), or a tail of zeros
    (the file grew but its last pages never reached the disk).  A record
    whole in length that fails its checksum is damage, not a torn write.
    """
    return (
        offset + RECORD_HEADER.size > len(data)
        or end > len(data)
        or data.count(0, offset) == len(data) - offset
    )


def _damage(path: str, offset: int, problem: str, following: int | None) -> JournalCorrupt:
    after = (
        f", with good records from offset {following} on"
        if following is not None
        else " (the last record)"
    )
    return JournalCorrupt(
        path,
        offset,
        f"{problem}{after}; the file is damaged, not torn. `quicx repair-journal {path}`"
        " keeps its good records and moves the file aside (see docs/operations.md)",
    )


def recover(path: str) -> Recovery:
    """
    Read the journal at C{path} (a missing file is an empty journal).

    @raise JournalCorrupt: the file is not a journal, or has a damaged record
        (whole in length, failing its checks).
    """
    data = _read_journal(path)
    if data is None:
        return Recovery((), 0, 0, 0, 0)
    if len(data) < len(MAGIC):
        return Recovery((), 0, 0, len(data), 0)
    live: dict[int, RecoveredTask] = {}
    last_task_id = 0
    reserved: int | None = None
    records = 0
    offset = len(MAGIC)
    view = memoryview(data)
    while offset < len(data):
        end, problem = _record_at(view, offset)
        if problem:
            following = _good_record_after(data, offset)
            if following is not None or not _is_torn(data, offset, end):
                raise _damage(path, offset, problem, following)
            break
        kind = data[offset + RECORD_HEADER.size]
        body = offset + RECORD_HEADER.size + 1
        task_id = ID.unpack_from(data, body)[0]
        if kind == KIND_SUBMIT:
            type_end = body + 5 + data[body + 4]
            live.pop(task_id, None)
            live[task_id] = RecoveredTask(task_id, data[body + 5 : type_end], data[type_end:end])
            last_task_id = task_id
        elif kind == KIND_RESERVE:
            reserved = task_id
        elif kind == KIND_CHECKPOINT:
            last_task_id = task_id
        else:
            live.pop(task_id, None)
        records += 1
        offset = end
    resume = reserved if reserved is not None else last_task_id
    return Recovery(tuple(live.values()), resume, offset, len(data) - offset, records)


def _read_journal(path: str) -> bytes | None:
    """
    The file's bytes (C{None} if there is none), its magic checked.

    @raise JournalCorrupt: it is not a journal, or cannot be read.
    """
    if os.path.exists(path) and not os.path.isfile(path):
        raise JournalCorrupt(path, 0, "not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise JournalCorrupt(path, 0, f"cannot read: {e.strerror}") from None
    if not (MAGIC.startswith(data) if len(data) < len(MAGIC) else data.startswith(MAGIC)):
        raise JournalCorrupt(path, 0, "not a Quicx journal (bad magic)")
    return data


@frozen
class Repair:
    """
    What L{repair} did.

    @ivar damaged: the damaged stretches dropped, as (offset, length).
    @ivar kept: how many good records the repaired journal keeps.
    @ivar moved_to: where the original file now is (C{""}: it needed no repair).
    """

    damaged: tuple[tuple[int, int], ...]
    kept: int
    moved_to: str


def repair(path: str, now: float) -> Repair:
    """
    Keep every good record of a damaged journal: the original file is renamed
    to C{PATH.damaged-TIMESTAMP} (nothing is deleted) and a journal of its good
    records, in order, takes its place.  A torn tail is dropped too.

    A dropped SUBMIT loses that task; a dropped outcome runs its task again:
    at-least-once, as after any crash.

    @raise JournalCorrupt: the file is not a journal at all.
    @raise OSError: the files could not be written.
    """
    data = _read_journal(path)
    if data is None or len(data) < len(MAGIC):
        raise JournalCorrupt(path, 0, "no journal to repair")
    view = memoryview(data)
    kept: list[bytes] = [MAGIC]
    damaged: list[tuple[int, int]] = []
    offset = len(MAGIC)
    while offset < len(data):
        end, problem = _record_at(view, offset)
        if not problem:
            kept.append(data[offset:end])
            offset = end
            continue
        following = _good_record_after(data, offset)
        stop = len(data) if following is None else following
        damaged.append((offset, stop - offset))
        offset = stop
    if not damaged:
        return Repair((), len(kept) - 1, "")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    moved_to = f"{path}.damaged-{stamp}"
    temporary = path + ".repair"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, b"".join(kept))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.link(path, moved_to)
    os.replace(temporary, path)
    sync_directory(path)
    return Repair(tuple(damaged), len(kept) - 1, moved_to)


# -- writing --------------------------------------------------------------------


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def sync_directory(path: str) -> None:
    """Make a rename in C{path}'s directory durable."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
