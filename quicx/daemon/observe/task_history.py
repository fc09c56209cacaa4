"""
The dashboard's history of finished tasks: what happened to a task, after it is gone.

L{TaskHistory} hears the kernel's hooks (it is plugged in only while the
dashboard is on) and keeps the most recent finished tasks (done, failed,
dead, cancelled, expired) in a ring, bounded three ways: C{[web]
task_history} records, C{[web] task_history_age} seconds, and C{[web]
task_history_bytes} in all.  Each record's bytes are accounted as it is
kept (a payload preview of at most C{[web] payload_preview} bytes, a
failure's reason cut to C{[web] failure_text} bytes, at most L{MAX_STEPS}
earlier steps of at most L{STEP_TEXT} bytes each), and so are the previews
and steps of the live tasks that will be part of their records: past the
budget, the oldest records go.  Each record is one tuple, appended as the
task finishes and made readable only when a page asks (L{render}): a DONE
costs a clock read, a tuple, its size and an append.  A search reads at
most C{[web] search_step} records a call (one reactor turn) and says where
to go on: its cursor.  A failing task's payload preview
is read from its block as it fails (or is retried); a DONE's block is
freed before its outcome is announced, so its preview is taken at its
delivery, and only with C{[web] preview_done} (a hook on every delivery).

The history is in memory, as Flower's is: a restart starts it empty.
What must survive a restart already does, in the journal: the dead-letter
set, and the outcomes a producer asked to keep.
"""

from __future__ import annotations

import base64
import sys
from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any, Final

from attrs import frozen

from quicx.daemon.queue.model import Session, Task

MAX_COUNT = 100_000
"""The most C{[web] task_history} may keep."""
MAX_STEPS = 16
"""The steps before its outcome (retries, requeues, replays) a record keeps: the latest."""
STEP_TEXT = 256
"""The bytes of a step's words kept (a retry's reason, cut)."""
RECORD_BYTES = 768
"""A record's own bytes beside its type, key, reason, preview and steps: its tuple (566 B
with its numbers and the worker's, queue's and state's names, held once the worker or queue
is gone), its slots in the ring and the index by id (about 60 B: tests/daemon/observe/
test_task_history.py)."""
BYTES_OBJECT = sys.getsizeof(b"")
"""A bytes object's own bytes."""
STEP_BYTES = 192
"""A step's own bytes beside its words: its tuple, time, kind and slot in its list (151 B)."""
STEPS_LIST = 128
"""A list of steps' own bytes beside its slots: its header and spare slots."""
LIVE_BYTES = 128
"""A live task's entry in the previews or the steps: its id and its slot in the table."""

# A record: one tuple (the cheapest to make), its fields at these places.
ID: Final = 0
TYPE: Final = 1
QUEUE: Final = 2
KEY: Final = 3
PRIORITY: Final = 4
SIZE: Final = 5
SUBMITTED: Final = 6
STARTED: Final = 7
FINISHED: Final = 8
ATTEMPTS: Final = 9
STATE: Final = 10
WORKER: Final = 11
REASON: Final = 12
PREVIEW: Final = 13
STEPS: Final = 14
BYTES: Final = 15

Step = tuple[float, str, str]
"""When, what (C{retrying}, C{requeued}, C{replayed}) and its words."""
Record = tuple[
    int,
    bytes,
    str,
    bytes | None,
    int,
    int,
    float,
    float,
    float,
    int,
    str,
    str | None,
    str,
    bytes | None,
    list[Step] | None,
    int,
]

STATES = ("done", "failed", "dead", "cancelled", "expired")
"""The outcomes a record can have."""


@frozen
class Search:
    """What to look for: any of these that is given must match (C{key}: a prefix)."""

    task_id: int = 0
    key: bytes | None = None
    task_type: bytes | None = None
    queue: str | None = None
    state: str | None = None

    def among(self, records: Iterable[Record]) -> Iterable[Record]:
        """The C{records} that match, in their order (one filter per field given)."""
        task_id, key, task_type, queue, state = (
            self.task_id,
            self.key,
            self.task_type,
            self.queue,
            self.state,
        )
        if task_id:
            records = (r for r in records if r[ID] == task_id)
        if state is not None:
            records = (r for r in records if r[STATE] == state)
        if queue is not None:
            records = (r for r in records if r[QUEUE] == queue)
        if task_type is not None:
            records = (r for r in records if r[TYPE] == task_type)
        if key is not None:
            records = (r for r in records if r[KEY] is not None and r[KEY].startswith(key))
        return records


NOTHING = Search()
"""A search for every record."""


def cut(text: str, limit: int) -> str:
    """C{text}, cut to C{limit} bytes of UTF-8 (C{...} says it was cut)."""
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return text
    return encoded[: max(0, limit - 3)].decode("utf-8", "ignore") + "..."


def _preview_bytes(preview: bytes | None) -> int:
    """The bytes a payload preview holds."""
    return 0 if preview is None else BYTES_OBJECT + len(preview)


def _step_bytes(step: Step) -> int:
    return STEP_BYTES + sys.getsizeof(step[2])


def _steps_bytes(steps: list[Step]) -> int:
    """The bytes of a task's steps (at most L{MAX_STEPS}) and their list."""
    return STEPS_LIST + sum(map(_step_bytes, steps))


class TaskHistory:
    """
    The recent finished tasks, newest last; the previews and steps of the
    live tasks that will be part of their record.  L{used}: the bytes of
    both, accounted as they come and go; at most L{budget}.

    @param head: reads the first bytes of a payload's block: C{head(block, n)}.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        head: Callable[[int, int], bytes],
        count: int,
        age: float,
        preview: int,
        failure_text: int,
        preview_done: bool,
        budget: int,
        step: int,
    ) -> None:
        self.clock = clock
        self.head = head
        self.limit = count
        """The most records kept (C{[web] task_history})."""
        self.age = age
        self.preview = preview
        self.failure_text = failure_text
        self.budget = budget
        """The most bytes kept (C{[web] task_history_bytes})."""
        self.step = step
        """The most records a search reads a call (C{[web] search_step})."""
        self.used = 0
        self.ring: deque[Record] = deque()
        self._end = 0
        """The place the next record will have: records are numbered as they come (cursors)."""
        self._by_id: dict[int, Record | list[Record]] = {}
        """Each task id's record, or its records oldest first (a replay makes another)."""
        self._expiry = -1.0
        """When the oldest record is past its age (C{-1}: the ring was empty)."""
        self._previews: dict[int, bytes] = {}
        self._steps: dict[int, list[Step]] = {}
        if not (preview and preview_done):
            # No hook: a delivery costs nothing.
            self.delivered = None  # type: ignore[assignment]

    # -- the kernel's hooks --------------------------------------------------

    def delivered(self, task: Task, worker: Session) -> None:
        self._remember(task)

    def _remember(self, task: Task) -> None:
        """Keep the preview of C{task}'s payload until it finishes (its block is freed then)."""
        previews = self._previews
        self._take_preview(task.task_id)
        preview = previews[task.task_id] = self.head(task.block, self.preview)
        self.used += LIVE_BYTES + _preview_bytes(preview)
        if len(previews) > self.limit:
            # A task that ended unheard; never more than the ring holds.
            self._take_preview(next(iter(previews)))
        if self.used > self.budget:
            self.expire(self.clock())

    def done(self, task: Task, worker: Session, attempt: int) -> None:
        preview = self._take_preview(task.task_id) if self._previews else None
        self._keep(task, "done", worker, attempt, "", preview)

    def failed(self, task: Task, worker: Session | None, reason: str, attempt: int | None) -> None:
        attempt = task.attempts if attempt is None else attempt
        self._keep(task, "failed", worker, attempt, reason, self._head(task))

    def buried(self, task: Task, worker: Session | None, reason: str, attempt: int | None) -> None:
        attempt = task.attempts if attempt is None else attempt
        self._keep(task, "dead", worker, attempt, reason, self._head(task))

    def cancelled(self, task: Task, why: str) -> None:
        preview = self._take_preview(task.task_id)
        self._keep(task, "cancelled", None, task.attempts, why, preview)

    def expired(self, task: Task, why: str) -> None:
        preview = self._take_preview(task.task_id)
        self._keep(task, "expired", None, task.attempts, why, preview)

    def retrying(
        self, task: Task, worker: Session | None, reason: str, attempt: int | None
    ) -> None:
        if self.preview and task.task_id not in self._previews:
            self._remember(task)
        self._step(task, "retrying", reason)

    def requeued(self, task: Task, cause: str) -> None:
        self._step(task, "requeued", cause)

    def replayed(self, task: Task) -> None:
        self._step(task, "replayed", "out of the dead-letter set")

    def withdrawn(self, task: Task) -> None:
        self._forget(task)

    def dropped(self, task: Task, why: str) -> None:
        self._forget(task)

    # -- keeping -------------------------------------------------------------

    def _head(self, task: Task) -> bytes | None:
        """The preview of a failing task's payload, read from its block (still live)."""
        self._take_preview(task.task_id)
        return self.head(task.block, self.preview) if self.preview else None

    def _keep(
        self,
        task: Task,
        state: str,
        worker: Session | None,
        attempt: int,
        reason: str,
        preview: bytes | None,
    ) -> None:
        now = self.clock()
        task_id, key = task.task_id, task.key
        size = RECORD_BYTES + BYTES_OBJECT + len(task.task_type)
        if key is not None:
            size += BYTES_OBJECT + len(key)
        if reason:
            reason = cut(reason, self.failure_text)
            size += sys.getsizeof(reason)
        if preview is not None:
            size += BYTES_OBJECT + len(preview)
        steps = self._take_steps(task_id) if self._steps else None
        if steps is not None:
            size += _steps_bytes(steps)
        record: Record = (
            task_id,
            task.task_type,
            task.home.name,
            key,
            task.priority,
            task.size,
            task.enqueued_at,
            task.dispatched_at,
            now,
            attempt,
            state,
            None if worker is None else worker.peer.peer_name,
            reason,
            preview,
            steps,
            size,
        )
        ring, by_id = self.ring, self._by_id
        ring.append(record)
        self._end += 1
        earlier = by_id.setdefault(task_id, record)
        if earlier is not record:
            self._index_again(earlier, record)
        self.used += size
        if len(ring) > self.limit or self.used > self.budget:
            # Full: one in, one out (inline, as a DONE does it at every task).
            gone = ring.popleft()
            self.used -= gone[BYTES]
            if by_id[gone[ID]] is gone:
                del by_id[gone[ID]]
            else:
                self._unindex(gone)
        if self.used > self.budget or now > self._expiry:
            self.expire(now)

    def _step(self, task: Task, kind: str, words: str) -> None:
        step = (self.clock(), kind, cut(words, STEP_TEXT))
        steps = self._steps.get(task.task_id)
        if steps is None:
            steps = self._steps[task.task_id] = []
            self.used += LIVE_BYTES + STEPS_LIST
            if len(self._steps) > self.limit:
                self._take_steps(next(iter(self._steps)))
        steps.append(step)
        self.used += _step_bytes(step)
        if len(steps) > MAX_STEPS:
            self.used -= _step_bytes(steps.pop(0))
        if self.used > self.budget:
            self.expire(step[0])

    def _take_preview(self, task_id: int) -> bytes | None:
        """Task C{task_id}'s live preview, no longer live, if it has one."""
        preview = self._previews.pop(task_id, None)
        if preview is not None:
            self.used -= LIVE_BYTES + _preview_bytes(preview)
        return preview

    def _take_steps(self, task_id: int) -> list[Step] | None:
        """Task C{task_id}'s live steps, no longer live, if it has any."""
        steps = self._steps.pop(task_id, None)
        if steps is not None:
            self.used -= LIVE_BYTES + _steps_bytes(steps)
        return steps

    def _forget(self, task: Task) -> None:
        self._take_preview(task.task_id)
        self._take_steps(task.task_id)

    def _index_again(self, earlier: Record | list[Record], record: Record) -> None:
        """Index C{record}, whose task has C{earlier} records (a replay's)."""
        if isinstance(earlier, list):
            earlier.append(record)
        else:
            self._by_id[record[ID]] = [earlier, record]

    def _unindex(self, record: Record) -> None:
        """Take C{record}, the oldest, out of the index by id."""
        by_id, task_id = self._by_id, record[ID]
        records = by_id[task_id]
        if isinstance(records, list):
            # A replayed task's: its oldest record is the oldest in the ring.
            del records[0]
            if len(records) == 1:
                by_id[task_id] = records[0]
        else:
            del by_id[task_id]

    def expire(self, now: float) -> None:
        """
        Forget the oldest records while there are more than C{task_history},
        or they take more than C{task_history_bytes}, or are older than
        C{task_history_age}; then, past the budget with no record left, the
        oldest live parts.
        """
        ring, oldest = self.ring, now - self.age
        while ring and (
            len(ring) > self.limit or self.used > self.budget or ring[0][FINISHED] < oldest
        ):
            record = ring.popleft()
            self.used -= record[BYTES]
            self._unindex(record)
        # The next time one may be older (evictions only make it later).
        self._expiry = ring[0][FINISHED] + self.age if ring else -1.0
        steps, previews = self._steps, self._previews
        while self.used > self.budget and (steps or previews):
            if steps:
                self._take_steps(next(iter(steps)))
            else:
                self._take_preview(next(iter(previews)))

    # -- reading -------------------------------------------------------------

    def search(self, search: Search, cursor: int | None, limit: int) -> dict[str, Any]:
        """
        At most C{limit} records that match, newest first, of those before
        C{cursor} (C{None}: the newest); C{next}: the cursor to go on from
        (C{None}: none older is left); C{scanned}: the records read (at most
        L{step}, but for a search by id, which its index answers at once).
        """
        self.expire(self.clock())
        first = self._end - len(self.ring)
        after: int | None
        if search.task_id:
            found = list(search.among(self.of(search.task_id)))
            page, after, scanned = found[:limit], None, len(found)
        else:
            filtered = search != NOTHING
            records, start = self._before(cursor, self.step if filtered else limit)
            page = list(islice(search.among(records), limit)) if filtered else records
            scanned = len(records)
            if filtered and len(page) == limit:
                # A full page: go on from its last record.
                start += len(records) - 1 - records.index(page[-1])
            after = start if start > first else None
        return {
            "tasks": [summary(record) for record in page],
            "next": after,
            "scanned": scanned,
            "kept": len(self.ring),
            "limit": self.limit,
        }

    def _before(self, cursor: int | None, most: int) -> tuple[list[Record], int]:
        """
        At most C{most} records, newest first, of those numbered below
        C{cursor} (C{None}: from the newest); and the number of the oldest of
        them.  Reached from the nearer end of the ring: at most half of it
        is skipped (in C), then C{most} read.
        """
        ring, end = self.ring, self._end
        first = end - len(ring)
        stop = end if cursor is None else max(first, min(cursor, end))
        start = max(first, stop - most)
        if end - stop <= start - first:
            found = list(islice(reversed(ring), end - stop, end - start))
        else:
            found = list(islice(ring, start - first, stop - first))
            found.reverse()
        return found, start

    def of(self, task_id: int) -> list[Record]:
        """Task C{task_id}'s records, newest first (one per outcome: a replay makes another)."""
        records = self._by_id.get(task_id)
        if records is None:
            return []
        if isinstance(records, list):
            return records[::-1]
        return [records]


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def summary(record: Record) -> dict[str, Any]:
    """A record as a row of the search's table."""
    started = record[STARTED]
    return {
        "id": record[ID],
        "type": _text(record[TYPE]),
        "queue": record[QUEUE],
        "key": _text(record[KEY]),
        "state": record[STATE],
        "attempts": record[ATTEMPTS],
        "finished_at": round(record[FINISHED], 3),
        "run": round(record[FINISHED] - started, 3) if started else None,
        "reason": record[REASON].partition("\n")[0] or None,
    }


def payload_view(data: bytes, size: int) -> dict[str, Any]:
    """A payload's preview: as text when it is UTF-8 without control bytes, else as hex."""
    view: dict[str, Any] = {"size": size, "shown": len(data), "cut": len(data) < size}
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError as e:
        # Cut inside a character: the text before it.
        text = data[: e.start].decode() if view["cut"] and e.start >= len(data) - 3 else None
    if text is not None and not _controls(text):
        view["text"] = text
    else:
        view["hex"] = data.hex(" ")
    view["base64"] = base64.b64encode(data).decode()
    return view


def _controls(text: str) -> bool:
    """Whether C{text} holds control characters other than tab and line ends."""
    return any((ord(c) < 32 and c not in "\t\r\n") or ord(c) == 127 for c in text)


def render(record: Record) -> dict[str, Any]:
    """A record in full, for the task page: its facts, payload, failure and timeline."""
    answer = summary(record)
    submitted, started, finished = record[SUBMITTED], record[STARTED], record[FINISHED]
    preview = record[PREVIEW]
    answer |= {
        "priority": record[PRIORITY],
        "size": record[SIZE],
        "submitted_at": round(submitted, 3),
        "started_at": round(started, 3) if started else None,
        "wait": round(started - submitted, 3) if started else None,
        "worker": record[WORKER],
        "reason": record[REASON] or None,
        "payload": None if preview is None else payload_view(preview, record[SIZE]),
    }
    timeline: list[dict[str, Any]] = [
        {"at": round(submitted, 3), "event": "submitted", "text": f"to queue {record[QUEUE]}"}
    ]
    steps = record[STEPS] or ()
    timeline += ({"at": round(at, 3), "event": kind, "text": words} for at, kind, words in steps)
    if started:
        worker = record[WORKER]
        timeline.append(
            {
                "at": round(started, 3),
                "event": "delivered",
                "text": f"attempt {record[ATTEMPTS]}" + (f" to {worker}" if worker else ""),
            }
        )
    timeline.append(
        {"at": round(finished, 3), "event": record[STATE], "text": answer["reason"] or ""}
    )
    timeline.sort(key=lambda step: step["at"])
    answer["timeline"] = timeline
    return answer
