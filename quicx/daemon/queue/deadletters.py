"""
The dead-letter sets: tasks that failed for good, kept for a person to see.

One bounded set across every queue (each task knows its queue): oldest
first, at most C{max_count} tasks and none older than C{max_age}.  The
tasks keep their pool blocks; the set names the tasks past its bounds, for
the queue to finish and L{remove}.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Generic, Protocol, TypeVar

from quicx.daemon.journal.interface import DeadInfo


class Mortal(Protocol):
    @property
    def task_id(self) -> int: ...

    @property
    def queue(self) -> str: ...

    @property
    def dead(self) -> DeadInfo | None: ...


T = TypeVar("T", bound=Mortal)


class DeadLetters(Generic[T]):
    """
    @ivar max_count: the most dead tasks kept (0: none).
    @ivar max_age: seconds a dead task is kept (0: until dropped by count).
    """

    def __init__(self, max_count: int, max_age: float) -> None:
        self.max_count = max_count
        self.max_age = max_age
        self._tasks: dict[int, T] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def get(self, task_id: int) -> T | None:
        return self._tasks.get(task_id)

    def oldest(self) -> T | None:
        return next(iter(self._tasks.values()), None)

    def add(self, task: T) -> list[T]:
        """Keep C{task} (its C{dead} set); the oldest tasks now past C{max_count}."""
        self._tasks[task.task_id] = task
        return list(islice(self._tasks.values(), max(0, len(self._tasks) - self.max_count)))

    def remove(self, task: T) -> None:
        del self._tasks[task.task_id]

    def expired(self, now: float) -> list[T]:
        """The tasks older than C{max_age}, oldest first."""
        old: list[T] = []
        if not self.max_age:
            return old
        for task in self._tasks.values():
            dead = task.dead
            if dead is None or dead.died_at > now - self.max_age:
                break
            old.append(task)
        return old

    def ids(self) -> list[int]:
        """The dead tasks' ids, oldest first."""
        return list(self._tasks)

    def of(self, queue: str | None) -> Iterator[T]:
        """The dead tasks of C{queue} (C{None}: every queue), oldest first."""
        tasks = self._tasks.values()
        if queue is None:
            return iter(list(tasks))
        return iter([task for task in tasks if task.queue == queue])
