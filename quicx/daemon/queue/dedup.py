"""
Idempotency keys: which task a (queue, key) pair submitted, for the window.

The keys of live tasks are always kept (the pool bounds how many tasks
live).  When a keyed task finishes, its key is remembered until
C{window} seconds after the task was submitted, so that a resubmit still
finds it; at most C{max_finished} such keys are kept, the oldest dropped
first.  Each remembered key costs about 300 bytes plus the key itself (the
entry, its place in the table, its pair; measured with tracemalloc over
100,000 keys: 293 bytes each; see docs/operations.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar

from quicx.daemon.journal.interface import KeyEntry


class _Task(Protocol):
    @property
    def task_id(self) -> int: ...


T = TypeVar("T", bound=_Task)
Key = tuple[str, bytes]


class KeyTable(Generic[T]):
    """
    @ivar evicted: finished keys dropped before their window ended, because
        the table was full.
    """

    def __init__(self, window: float, max_finished: int) -> None:
        self.window = window
        self.max_finished = max_finished
        self.live: dict[Key, T] = {}
        self.finished: OrderedDict[Key, KeyEntry] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.live) + len(self.finished)

    def find(self, queue: str, key: bytes, now: float) -> T | KeyEntry | None:
        """The live task, or the finished one's entry, that C{key} submitted."""
        found = self.live.get((queue, key))
        if found is not None:
            return found
        entry = self.finished.get((queue, key))
        if entry is not None and entry.submitted_at + self.window <= now:
            del self.finished[(queue, key)]
            return None
        return entry

    def add(self, queue: str, key: bytes, task: T) -> None:
        self.finished.pop((queue, key), None)
        self.live[(queue, key)] = task

    def drop(self, queue: str, key: bytes) -> None:
        """Forget a live task's key (its SUBMIT was refused)."""
        self.live.pop((queue, key), None)

    def finish(self, entry: KeyEntry, now: float) -> None:
        """Its task finished: remember the key for the rest of the window."""
        pair = (entry.queue, entry.key)
        live = self.live.get(pair)
        if live is not None and live.task_id == entry.task_id:
            del self.live[pair]
        elif live is not None:
            return  # a newer task holds the key: it, not this one, answers
        if entry.submitted_at + self.window > now and self.max_finished:
            self.finished[pair] = entry
            self.finished.move_to_end(pair)
        self.expire(now)

    def expire(self, now: float) -> None:
        """Drop finished keys past their window (oldest first) and any over the limit."""
        finished = self.finished
        while len(finished) > self.max_finished:
            finished.popitem(last=False)
            self.evicted += 1
        while finished:
            entry = next(iter(finished.values()))
            if entry.submitted_at + self.window > now:
                break
            finished.popitem(last=False)

    def restore(self, entries: Iterable[KeyEntry], now: float) -> None:
        for entry in sorted(entries, key=lambda e: e.submitted_at):
            self.finish(entry, now)

    def entries(self) -> Iterator[KeyEntry]:
        """The finished keys still remembered (for the journal's compaction)."""
        return iter(list(self.finished.values()))
