"""
The ring that holds the dashboard's history of finished tasks, read a bounded slice at a time.

Records, oldest first, each at its place since the daemon started (its
sequence number), read newest first a bounded slice at a time, and found by
task id through an index kept as records come and go.

Every operation costs O(1) (amortized: the list's slots of evicted records
are let go in one move once they are half of it), but reading: a slice of
at most the records asked for, and a task's records.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

COMPACT = 1024
"""Evicted slots let go once there are at least this many, and they are half the list."""

Record = tuple[Any, ...]
"""A record: a tuple whose first field is its task's id (see L{task_history})."""


class Ring:
    """The records, oldest first: appended at the end, evicted from the start."""

    def __init__(self) -> None:
        self._slots: list[Record | None] = []
        self._first = 0
        """The slot of the oldest record: those before it are evicted."""
        self._base = 0
        """The sequence number of the record in slot 0."""
        self._by_id: dict[int, Record | list[Record]] = {}
        """Each task id's record, or its records oldest first (a replay makes another)."""

    def __len__(self) -> int:
        return len(self._slots) - self._first

    def __iter__(self) -> Iterator[Record]:
        """The records, oldest first."""
        return islice(self._slots, self._first, None)  # type: ignore[arg-type]

    @property
    def oldest(self) -> Record:
        record = self._slots[self._first]
        assert record is not None
        return record

    @property
    def end(self) -> int:
        """The sequence number the next record will have."""
        return self._base + len(self._slots)

    @property
    def start(self) -> int:
        """The sequence number of the oldest record (L{end} when there is none)."""
        return self._base + self._first

    def append(self, record: Record) -> None:
        self._slots.append(record)
        by_id, task_id = self._by_id, record[0]
        earlier = by_id.get(task_id)
        if earlier is None:
            by_id[task_id] = record
        elif type(earlier) is list:
            earlier.append(record)
        else:
            by_id[task_id] = [earlier, record]  # type: ignore[list-item]

    def popleft(self) -> Record:
        """Evict the oldest record; it."""
        slots, first = self._slots, self._first
        record = slots[first]
        assert record is not None
        slots[first] = None
        first += 1
        if first >= COMPACT and 2 * first >= len(slots):
            del slots[:first]
            self._base += first
            first = 0
        self._first = first
        by_id, task_id = self._by_id, record[0]
        records = by_id[task_id]
        if type(records) is list:
            # The oldest record in the ring is its task's oldest.
            del records[0]
            if len(records) == 1:
                by_id[task_id] = records[0]
        else:
            del by_id[task_id]
        return record

    def of(self, task_id: int) -> list[Record]:
        """Task C{task_id}'s records, newest first."""
        records = self._by_id.get(task_id)
        if records is None:
            return []
        if type(records) is list:
            return records[::-1]
        return [records]  # type: ignore[list-item]

    def before(self, cursor: int | None, most: int) -> tuple[list[Record], int]:
        """
        At most C{most} records, newest first, of those whose sequence number
        is below C{cursor} (C{None}: from the newest); and the sequence number
        of the oldest of them (L{start} or below: none older is left).
        """
        base, end = self._base, self.end
        stop = end if cursor is None else max(self.start, min(cursor, end))
        start = max(self.start, stop - most)
        found = self._slots[start - base : stop - base]
        found.reverse()
        return found, start  # type: ignore[return-value]
