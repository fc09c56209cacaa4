"""Reading a journal back: what survives a crash, and repairing a damaged file."""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Callable

from attrs import evolve, frozen

from quicx.daemon.journal.interface import (
    DeadInfo,
    GroupEntry,
    KeptEntry,
    KeyEntry,
    ParentEntry,
    SavedState,
)
from quicx.daemon.journal.records import (
    ATTEMPTS_HEAD,
    AUTOMATIC,
    BACKOFF,
    DEAD_HEAD,
    DEADLINE_HEAD,
    FIRED_HEAD,
    FORGOTTEN,
    FORMAT,
    GROUP_HEAD,
    ID,
    KEY_HEAD,
    KIND_ATTEMPTS,
    KIND_CANCELLED,
    KIND_CHECKPOINT,
    KIND_DEAD,
    KIND_DEADLINE,
    KIND_DONE,
    KIND_FIRED,
    KIND_GROUP,
    KIND_KEY,
    KIND_MOVED,
    KIND_PARENT,
    KIND_PAUSE,
    KIND_REPLACE,
    KIND_REPLAY,
    KIND_RESERVE,
    KIND_RESULT,
    KIND_RETRY,
    KIND_SCHEDULE,
    KIND_SHARED,
    KIND_SUBMIT,
    KIND_SUBMIT2,
    KIND_SUBMIT3,
    KIND_SUBMIT4,
    KIND_SUBMIT5,
    KIND_SUBMIT6,
    KIND_TASK_CHECKPOINT,
    KIND_UNSCHEDULE,
    KINDS,
    MAGIC,
    MAGICS,
    MAX_BODY,
    OUTCOME_CODES,
    OUTCOME_NAMES,
    PARENT_HEAD,
    RECORD_HEADER,
    REPLACE_HEAD,
    RESULT_HEAD,
    RETRY_HEAD,
    SAVED_HEAD,
    SHARED_HEAD,
    SUBMIT2_HEAD,
    SUBMIT3_HEAD,
    SUBMIT4_HEAD,
    SUBMIT5_HEAD,
    SUBMIT6_HEAD,
    SUBMIT_HEAD,
    JournalCorrupt,
    RecoveredTask,
    Recovery,
)
from quicx.protocol.taskflow import Result, ResultKind
from quicx.protocol.tracecontext import TRACE_HEAD

_OUTCOME_OF_KIND = {KIND_DONE: "done", KIND_CANCELLED: "cancelled"}
_RESULT_STATES = frozenset((*range(1, FORGOTTEN + 1), OUTCOME_CODES["expired"]))
_RESULT_KINDS = frozenset(range(4))
_GROUP_PHASES = frozenset(range(4))
_GROUP_FORGOTTEN = 3
_MAX_POLICY = 2
_MAX_PARENTS = 63
_PARENT_STATES = frozenset({1, 2, 3, 4, 6, 7})
_ENDED_STATES = {"done": 1, "failed": 2, "cancelled": 3, "dead": 4, "expired": 7}
_LIFECYCLE_HEADS = {
    KIND_SUBMIT3: (SUBMIT3_HEAD, 5),
    KIND_SUBMIT4: (SUBMIT4_HEAD, 5),
    KIND_SUBMIT5: (SUBMIT5_HEAD, 6),
}
"""Each lifecycle SUBMIT's head, and how many lengths end it."""


_View = bytes | memoryview


def _submit_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < SUBMIT_HEAD.size or SUBMIT_HEAD.size + data[start + 5] > length:
        return "SUBMIT record shorter than its task type"
    return ""


def _submit2_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < SUBMIT2_HEAD.size:
        return "SUBMIT record shorter than its header"
    _, _, _, _, queue, task_type, key, fairness = SUBMIT2_HEAD.unpack_from(data, start)
    if not queue or SUBMIT2_HEAD.size + queue + task_type + key + fairness > length:
        return "SUBMIT record shorter than its fields"
    return ""


def _lifecycle_problem(data: _View, kind: int, start: int, length: int) -> str:
    head, count = _LIFECYCLE_HEADS[kind]
    if length < head.size:
        return "SUBMIT record shorter than its header"
    queue, task_type, key, fairness, backoff, *trace = head.unpack_from(data, start)[-count:]
    if not queue or backoff not in (0, BACKOFF.size) or (trace and trace[0] < TRACE_HEAD):
        return "SUBMIT record of the wrong shape"
    if head.size + queue + task_type + key + fairness + backoff + sum(trace) > length:
        return "SUBMIT record shorter than its fields"
    return ""


def _submit6_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < SUBMIT6_HEAD.size:
        return "SUBMIT record shorter than its header"
    *_, queue, task_type, key, fairness, backoff, trace, policy, group, count = (
        SUBMIT6_HEAD.unpack_from(data, start)
    )
    if (
        not queue
        or backoff not in (0, BACKOFF.size)
        or 0 < trace < TRACE_HEAD
        or policy > _MAX_POLICY
        or not (count or group)
        or count > _MAX_PARENTS
    ):
        return "SUBMIT record of the wrong shape"
    fields = queue + task_type + key + fairness + backoff + trace + 4 * count
    if SUBMIT6_HEAD.size + fields > length:
        return "SUBMIT record shorter than its fields"
    return ""


def _parent_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < PARENT_HEAD.size:
        return "PARENT record shorter than its header"
    *_, state, result_kind = PARENT_HEAD.unpack_from(data, start)
    if state not in _PARENT_STATES or result_kind not in _RESULT_KINDS:
        return "PARENT record of the wrong shape"
    return ""


def _result_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < RESULT_HEAD.size:
        return "RESULT record shorter than its header"
    _, _, state, result_kind, _ = RESULT_HEAD.unpack_from(data, start)
    if state not in _RESULT_STATES or result_kind & ~AUTOMATIC not in _RESULT_KINDS:
        return "RESULT record of the wrong shape"
    if state == FORGOTTEN and result_kind > 1:
        return "RESULT record of the wrong shape"
    if state == FORGOTTEN and length != RESULT_HEAD.size:
        return "RESULT record of the wrong length"
    return ""


def _group_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length != GROUP_HEAD.size or data[start + 5] not in _GROUP_PHASES:
        return "GROUP record of the wrong shape"
    return ""


def _retry_problem(data: _View, kind: int, start: int, length: int) -> str:
    return "" if length == RETRY_HEAD.size else "RETRY record of the wrong length"


def _attempts_problem(data: _View, kind: int, start: int, length: int) -> str:
    return "" if length == ATTEMPTS_HEAD.size else "ATTEMPTS record of the wrong length"


def _dead_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < DEAD_HEAD.size:
        return "DEAD record shorter than its header"
    *_, reason, worker = DEAD_HEAD.unpack_from(data, start)
    if DEAD_HEAD.size + reason + worker != length:
        return "DEAD record of the wrong length"
    return ""


def _saved_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < SAVED_HEAD.size:
        return "CHECKPOINT record shorter than its header"
    if data[start + SAVED_HEAD.size - 1] not in _STATE_KINDS_OF_RESULTS:
        return f"CHECKPOINT record of unknown state kind {data[start + SAVED_HEAD.size - 1]}"
    return ""


_STATE_KINDS_OF_RESULTS = frozenset(ResultKind)


def _fired_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < FIRED_HEAD.size or not data[start + 9]:
        return "FIRED record of the wrong shape"
    if FIRED_HEAD.size + data[start + 9] != length:
        return "FIRED record of the wrong length"
    return ""


def _schedule_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < 3 or not data[start + 1] or 2 + data[start + 1] > length:
        return "SCHEDULE record of the wrong shape"
    if kind == KIND_UNSCHEDULE and 2 + data[start + 1] != length:
        return "UNSCHEDULE record of the wrong length"
    return ""


def _shared_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < SHARED_HEAD.size or not data[start + 5]:
        return "SHARED record of the wrong shape"
    name_end = SHARED_HEAD.size + data[start + 5]
    if name_end > length or (not ID.unpack_from(data, start + 1)[0] and name_end != length):
        return "SHARED record of the wrong length"
    return ""


def _pause_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < 3 or data[start + 1] > 1 or not data[start + 2] or 3 + data[start + 2] != length:
        return "PAUSE record of the wrong shape"
    return ""


def _key_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < KEY_HEAD.size:
        return "KEY record shorter than its header"
    _, _, _, outcome, queue, key = KEY_HEAD.unpack_from(data, start)
    if outcome not in OUTCOME_NAMES or not queue or not key:
        return "KEY record of the wrong shape"
    if KEY_HEAD.size + queue + key != length:
        return "KEY record of the wrong length"
    return ""


def _deadline_problem(data: _View, kind: int, start: int, length: int) -> str:
    return "" if length == DEADLINE_HEAD.size else "DEADLINE record of the wrong length"


def _replace_problem(data: _View, kind: int, start: int, length: int) -> str:
    return "" if length >= REPLACE_HEAD.size else "REPLACE record shorter than its header"


def _moved_problem(data: _View, kind: int, start: int, length: int) -> str:
    if length < 7 or 6 + data[start + 5] != length:
        return "MOVED record of the wrong length"
    return ""


_BODY_CHECKS: dict[int, Callable[[_View, int, int, int], str]] = {
    KIND_SUBMIT: _submit_problem,
    KIND_SUBMIT2: _submit2_problem,
    KIND_SUBMIT3: _lifecycle_problem,
    KIND_SUBMIT4: _lifecycle_problem,
    KIND_SUBMIT5: _lifecycle_problem,
    KIND_SUBMIT6: _submit6_problem,
    KIND_PARENT: _parent_problem,
    KIND_RESULT: _result_problem,
    KIND_GROUP: _group_problem,
    KIND_RETRY: _retry_problem,
    KIND_ATTEMPTS: _attempts_problem,
    KIND_DEAD: _dead_problem,
    KIND_TASK_CHECKPOINT: _saved_problem,
    KIND_FIRED: _fired_problem,
    KIND_SCHEDULE: _schedule_problem,
    KIND_UNSCHEDULE: _schedule_problem,
    KIND_SHARED: _shared_problem,
    KIND_PAUSE: _pause_problem,
    KIND_KEY: _key_problem,
    KIND_DEADLINE: _deadline_problem,
    KIND_REPLACE: _replace_problem,
    KIND_MOVED: _moved_problem,
}
"""
What is wrong with a record's body, by kind (C{data}, C{kind}, where the
body starts, its length): the message, or C{""}.  Any other kind is its
kind byte and a task id (5 bytes).
"""


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
    if not 2 <= length <= MAX_BODY:
        return end, f"impossible record length {length}"
    if end > end_of_data:
        return end, f"record of {length} bytes runs past the end of the file"
    if zlib.crc32(data[body_start:end]) != checksum:
        return end, "checksum mismatch"
    kind = data[body_start]
    if kind not in KINDS:
        return end, f"unknown record kind {kind}"
    check = _BODY_CHECKS.get(kind)
    if check is None:  # its kind byte and a task id
        return end, "" if length == 5 else f"record of kind {kind} has {length} bytes, not 5"
    return end, check(data, kind, body_start, length)


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
    replay = _Replay()
    offset = _replay_records(path, data, replay)
    return replay.recovery(data, offset)


def _replay_records(path: str, data: bytes, replay: _Replay) -> int:
    """
    Apply each good record of C{data} to C{replay}, in order: the offset
    where they end (a torn tail is left out).

    @raise JournalCorrupt: a record is damaged, not torn.
    """
    offset = len(MAGIC)
    view = memoryview(data)
    while offset < len(data):
        end, problem = _record_at(view, offset)
        if problem:
            following = _good_record_after(data, offset)
            if following is not None or not _is_torn(data, offset, end):
                raise _damage(path, offset, problem, following)
            break
        replay.apply(data, offset + RECORD_HEADER.size, end)
        offset = end
    return offset


_NAMED_KINDS = frozenset({KIND_PAUSE, KIND_FIRED, KIND_SCHEDULE, KIND_UNSCHEDULE, KIND_SHARED})
"""The records of a queue, a schedule or shared data: of no task."""
_STATE_KINDS = frozenset(
    {
        KIND_RETRY,
        KIND_DEAD,
        KIND_REPLAY,
        KIND_ATTEMPTS,
        KIND_TASK_CHECKPOINT,
        KIND_REPLACE,
        KIND_MOVED,
    }
)


class _Replay:
    """What a journal's records say, as they are read in order."""

    def __init__(self) -> None:
        self.live: dict[int, RecoveredTask] = {}
        self.paused: dict[str, bool] = {}
        self.keys: dict[tuple[str, bytes], KeyEntry] = {}
        self.fired: dict[str, float] = {}
        self.schedules: dict[str, bytes] = {}
        self.shared: dict[str, tuple[int, bytes]] = {}
        self.outcomes = _Outcomes()
        # The outcomes waiting tasks need: PARENT records, and the ends of
        # the parents named (in case a crash cut their PARENT record off).
        self.parents: dict[tuple[int, int], ParentEntry] = {}
        self.named: set[int] = set()
        self.ended: dict[int, str] = {}
        self.last_task_id = 0
        self.reserved: int | None = None
        self.records = 0

    def apply(self, data: bytes, start: int, end: int) -> None:
        """Apply the (checked) record whose body is C{data[start:end]}."""
        self.records += 1
        kind = data[start]
        if kind in _NAMED_KINDS:
            if kind == KIND_SHARED:
                _shared_record(data, start, end, self.shared)
            else:
                _schedule_record(
                    data, kind, start + 1, end, self.paused, self.fired, self.schedules
                )
            return
        if kind == KIND_GROUP:
            self.outcomes.group(data, start)
            return
        # A record about a task.
        task_id = ID.unpack_from(data, start + 1)[0]
        if kind == KIND_SUBMIT:
            type_end = start + 6 + data[start + 5]
            self._submitted(RecoveredTask(task_id, data[start + 6 : type_end], data[type_end:end]))
        elif kind == KIND_SUBMIT2:
            self._submitted(_submit2(data, start, end))
        elif kind in _LIFECYCLE_HEADS:
            recovered = _lifecycle_submit(data, start, end, kind)
            self._submitted(recovered)
            self.outcomes.join(recovered.group)
        elif kind == KIND_SUBMIT6:
            recovered = _submit6(data, start, end)
            self._submitted(recovered)
            self.outcomes.join(recovered.group)
            self.named.update(recovered.after[2] if recovered.after else ())
        elif kind == KIND_PARENT:
            _, _, group, state, result_kind = PARENT_HEAD.unpack_from(data, start)
            self.parents[(task_id, group)] = ParentEntry(
                task_id, group, state, result_kind, data[start + PARENT_HEAD.size : end]
            )
        elif kind in _STATE_KINDS:
            self._changed(data, kind, task_id, start, end)
        elif kind == KIND_DEADLINE:
            self._deadline(task_id, DEADLINE_HEAD.unpack_from(data, start)[2])
        elif kind == KIND_RESULT:
            self.outcomes.result(data, start, end)
        elif kind == KIND_KEY:
            entry = _key(data, start, end)
            self.keys[(entry.queue, entry.key)] = entry
        elif kind == KIND_RESERVE:
            self.reserved = task_id
        elif kind == KIND_CHECKPOINT:
            self.last_task_id = task_id
        else:
            self._finished(task_id, _OUTCOME_OF_KIND.get(kind, "failed"))

    def _submitted(self, task: RecoveredTask) -> None:
        """A task submitted (again, if its id was: the later one is live, and last)."""
        self.live.pop(task.task_id, None)
        self.live[task.task_id] = task
        self.last_task_id = task.task_id

    def _changed(self, data: bytes, kind: int, task_id: int, start: int, end: int) -> None:
        """
        A live task's RETRY, DEAD, REPLAY, ATTEMPTS or CHECKPOINT: a dead
        task leaves its group, counted.
        """
        task = self.live.get(task_id)
        if task is None:
            return
        if kind == KIND_DEAD and task_id in self.named:
            self.ended[task_id] = "dead"
        self.live[task_id] = _change(task, kind, data, start, end)
        if kind == KIND_DEAD and task.group:
            self.outcomes.count(task.group, "failed")
            self.live[task_id] = evolve(self.live[task_id], group=0)

    def _deadline(self, task_id: int, deadline_ms: int) -> None:
        """A live task's deadline to start; 0: it expired."""
        if not deadline_ms:
            self._finished(task_id, "expired")
            return
        task = self.live.get(task_id)
        if task is not None:
            self.live[task_id] = evolve(task, deadline=deadline_ms / 1000)

    def _finished(self, task_id: int, outcome: str) -> None:
        """A task's outcome: it leaves the live tasks, its group counts it, its key says it."""
        if task_id in self.named:
            self.ended[task_id] = outcome
        task = self.live.pop(task_id, None)
        if task is None:
            return
        if task.group:
            self.outcomes.count(task.group, outcome)
        if task.key is not None and task.queue is not None:
            submitted = task.enqueued_at or 0.0
            self.keys[(task.queue, task.key)] = KeyEntry(
                task.queue, task.key, task_id, submitted, outcome
            )

    def recovery(self, data: bytes, offset: int) -> Recovery:
        """What the records read (up to C{offset}) say."""
        for task in self.live.values():
            # A live task's key is its own, whatever an earlier task with it left.
            if task.key is not None and task.queue is not None:
                self.keys.pop((task.queue, task.key), None)
        outcomes = self.outcomes
        return Recovery(
            tuple(self.live.values()),
            self.reserved if self.reserved is not None else self.last_task_id,
            offset,
            len(data) - offset,
            self.records,
            frozenset(name for name, is_paused in self.paused.items() if is_paused),
            tuple(self.keys.values()),
            MAGICS[data[: len(MAGIC)]],
            self.fired,
            self.schedules,
            self.shared,
            tuple(outcomes.kept.values()),
            tuple(outcomes.forgotten),
            tuple(outcomes.groups.values()),
            outcomes.last_group_id,
            frozenset(task_id for task_id, evicted in outcomes.forgotten.items() if evicted),
            self._parents(),
        )

    def _parents(self) -> tuple[ParentEntry, ...]:
        """The PARENT records, and an entry (without data) for a parent's end without one."""
        parents = self.parents
        for task_id, outcome in self.ended.items():
            if (task_id, 0) not in parents:
                parents[(task_id, 0)] = ParentEntry(task_id, 0, _ENDED_STATES[outcome], 0, b"")
        return tuple(parents.values())


def _schedule_record(
    data: bytes,
    kind: int,
    body: int,
    end: int,
    paused: dict[str, bool],
    fired: dict[str, float],
    schedules: dict[str, bytes],
) -> None:
    """Apply a (checked) record about a queue or a schedule, not a task."""
    if kind == KIND_PAUSE:
        paused[data[body + 2 : end].decode("ascii")] = bool(data[body])
    elif kind == KIND_FIRED:
        fire_ms = FIRED_HEAD.unpack_from(data, body - 1)[1]
        fired[data[body + 9 : end].decode("ascii")] = fire_ms / 1000
    else:
        name_end = body + 1 + data[body]
        name = data[body + 1 : name_end].decode("ascii")
        if kind == KIND_SCHEDULE:
            schedules[name] = data[name_end:end]
        else:
            schedules.pop(name, None)


def _shared_record(data: bytes, start: int, end: int, shared: dict[str, tuple[int, bytes]]) -> None:
    """Apply the (checked) SHARED record whose body is C{data[start:end]}."""
    _, version, name_length = SHARED_HEAD.unpack_from(data, start)
    name_end = start + SHARED_HEAD.size + name_length
    name = data[start + SHARED_HEAD.size : name_end].decode("ascii")
    if version:
        shared[name] = (version, data[name_end:end])
    else:
        shared.pop(name, None)


def _change(task: RecoveredTask, kind: int, data: bytes, start: int, end: int) -> RecoveredTask:
    """
    A live task after a (checked) RETRY, DEAD, REPLAY, ATTEMPTS, CHECKPOINT
    or REPLACE record: a RETRY's or DEAD's failures are its attempts, unless
    an ATTEMPTS follows; a REPLACE's payload and due time are its own.
    """
    if kind == KIND_TASK_CHECKPOINT:
        _, _, saved_ms, state_kind = SAVED_HEAD.unpack_from(data, start)
        state = Result(ResultKind(state_kind), data[start + SAVED_HEAD.size : end])
        return evolve(task, checkpoint=SavedState(state, saved_ms / 1000))
    if kind == KIND_REPLACE:
        due_ms = REPLACE_HEAD.unpack_from(data, start)[2]
        return evolve(task, payload=data[start + REPLACE_HEAD.size : end], due=due_ms / 1000)
    if kind == KIND_ATTEMPTS:
        return evolve(task, attempts=ATTEMPTS_HEAD.unpack_from(data, start)[2])
    if kind == KIND_MOVED:
        return evolve(task, queue=data[start + 6 : end].decode("ascii"))
    if kind == KIND_RETRY:
        _, _, failures, due_ms = RETRY_HEAD.unpack_from(data, start)
        return evolve(task, failures=failures, attempts=failures, due=due_ms / 1000)
    if kind == KIND_DEAD:
        _, _, died_ms, failures, reason_length, _ = DEAD_HEAD.unpack_from(data, start)
        reason_end = start + DEAD_HEAD.size + reason_length
        dead = DeadInfo(
            died_ms / 1000,
            data[start + DEAD_HEAD.size : reason_end].decode("utf-8", "replace"),
            data[reason_end:end].decode("utf-8", "replace"),
        )
        return evolve(task, failures=failures, attempts=failures, due=0.0, dead=dead)
    return evolve(task, failures=0, due=0.0, dead=None)


def _split(data: bytes, offset: int, lengths: tuple[int, ...], end: int) -> list[bytes]:
    """The fields of these lengths from C{offset} on, then the rest up to C{end}."""
    fields = []
    for length in lengths:
        fields.append(data[offset : offset + length])
        offset += length
    fields.append(data[offset:end])
    return fields


def _submit2(data: bytes, start: int, end: int) -> RecoveredTask:
    """The task of the (checked) version-2 SUBMIT record whose body is C{data[start:end]}."""
    _, task_id, priority, enqueued_ms, *lengths = SUBMIT2_HEAD.unpack_from(data, start)
    queue, task_type, key, fairness, payload = _split(
        data, start + SUBMIT2_HEAD.size, tuple(lengths), end
    )
    return RecoveredTask(
        task_id,
        task_type,
        payload,
        queue.decode("ascii"),
        priority,
        enqueued_ms / 1000,
        key or None,
        fairness or None,
    )


def _lifecycle_submit(data: bytes, start: int, end: int, kind: int) -> RecoveredTask:
    """
    The task of the (checked) SUBMIT3 or SUBMIT4 record whose body is
    C{data[start:end]}: a SUBMIT4 adds its keep time and group, a SUBMIT5
    its trace context.
    """
    head, count = _LIFECYCLE_HEADS[kind]
    _, task_id, priority, enqueued_ms, due_ms, retries, failures, *rest = head.unpack_from(
        data, start
    )
    keep_ms, group = rest[:-count] or (0, 0)
    queue, task_type, key, fairness, backoff, *fields = _split(
        data, start + head.size, tuple(rest[-count:]), end
    )
    trace, payload = fields if count == 6 else (None, fields[0])
    numbers = (task_id, priority, enqueued_ms, due_ms, retries, failures, keep_ms, group)
    return _lifecycle_task(numbers, (queue, task_type, key, fairness, backoff), payload, trace)


def _submit6(data: bytes, start: int, end: int) -> RecoveredTask:
    """The task of the (checked) SUBMIT6 record whose body is C{data[start:end]}."""
    _, task_id, priority, enqueued_ms, due_ms, retries, failures, keep_ms, group, *rest = (
        SUBMIT6_HEAD.unpack_from(data, start)
    )
    *lengths, policy, after_group, count = rest
    queue, task_type, key, fairness, backoff, trace, parents, payload = _split(
        data, start + SUBMIT6_HEAD.size, (*lengths, 4 * count), end
    )
    numbers = (task_id, priority, enqueued_ms, due_ms, retries, failures, keep_ms, group)
    after = (policy, after_group, struct.unpack(f">{count}I", parents))
    fields = (queue, task_type, key, fairness, backoff)
    return _lifecycle_task(numbers, fields, payload, trace or None, after)


def _lifecycle_task(
    numbers: tuple[int, int, int, int, int, int, int, int],
    fields: tuple[bytes, bytes, bytes, bytes, bytes],
    payload: bytes,
    trace: bytes | None,
    after: tuple[int, int, tuple[int, ...]] | None = None,
) -> RecoveredTask:
    """A SUBMIT3-6 record's task, of its numbers and fields as read (see the callers)."""
    task_id, priority, enqueued_ms, due_ms, retries, failures, keep_ms, group = numbers
    queue, task_type, key, fairness, backoff = fields
    return RecoveredTask(
        task_id,
        task_type,
        payload,
        queue.decode("ascii"),
        priority,
        enqueued_ms / 1000,
        key or None,
        fairness or None,
        due_ms / 1000,
        retries,
        failures,
        BACKOFF.unpack(backoff) if backoff else None,
        keep_for=keep_ms / 1000,
        group=group,
        attempts=failures,
        trace=trace,
        after=after,
    )


class _Outcomes:
    """
    What a journal says of kept outcomes and groups, as its records are read.

    A GROUP record states a group's counts as they were; each member that
    joins (its SUBMIT) or finishes (its outcome, or DEAD) after it moves
    them on.  A member counted leaves its group.
    """

    def __init__(self) -> None:
        self.kept: dict[int, KeptEntry] = {}
        # Each forgotten id, and whether it was evicted (not expired).
        self.forgotten: dict[int, bool] = {}
        self.groups: dict[int, GroupEntry] = {}
        self.last_group_id = 0

    def result(self, data: bytes, start: int, end: int) -> None:
        _, task_id, state, kind, expires_ms = RESULT_HEAD.unpack_from(data, start)
        self.kept.pop(task_id, None)
        self.forgotten.pop(task_id, None)
        if state == FORGOTTEN:
            self.forgotten[task_id] = bool(kind)
        else:
            entry = KeptEntry(
                task_id,
                state,
                kind & ~AUTOMATIC,
                expires_ms / 1000,
                data[start + RESULT_HEAD.size : end],
                bool(kind & AUTOMATIC),
            )
            self.kept[task_id] = entry

    def group(self, data: bytes, start: int) -> None:
        _, group_id, phase, opened_ms, finished_ms, *counts = GROUP_HEAD.unpack_from(data, start)
        self.last_group_id = max(self.last_group_id, group_id)
        if phase == _GROUP_FORGOTTEN:
            self.groups.pop(group_id, None)
            return
        self.groups[group_id] = GroupEntry(
            group_id, phase, opened_ms / 1000, finished_ms / 1000, *counts
        )

    def join(self, group_id: int) -> None:
        entry = self.groups.get(group_id)
        if entry is not None:
            self.groups[group_id] = evolve(entry, members=entry.members + 1)

    def count(self, group_id: int, outcome: str) -> None:
        entry = self.groups.get(group_id)
        if entry is not None:
            field = outcome if outcome in ("done", "cancelled") else "failed"
            self.groups[group_id] = evolve(entry, **{field: getattr(entry, field) + 1})


def _key(data: bytes, start: int, end: int) -> KeyEntry:
    """The entry of the (checked) KEY record whose body is C{data[start:end]}."""
    _, task_id, submitted_ms, outcome, queue_length, _ = KEY_HEAD.unpack_from(data, start)
    queue = start + KEY_HEAD.size
    return KeyEntry(
        data[queue : queue + queue_length].decode("ascii"),
        data[queue + queue_length : end],
        task_id,
        submitted_ms / 1000,
        OUTCOME_NAMES[outcome],
    )


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
    head = data[: len(MAGIC)]
    if len(data) < len(MAGIC):
        if not any(magic.startswith(data) for magic in MAGICS):
            raise JournalCorrupt(path, 0, "not a Quicx journal (bad magic)")
    elif head not in MAGICS:
        if head[:6] == MAGIC[:6] and head[6:7].isdigit() and head[7:] == b"\n":
            raise JournalCorrupt(
                path,
                0,
                f"written by a newer Quicx (journal format {head[6:7].decode()});"
                f" this release reads formats 1 to {FORMAT}",
            )
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
    kept: list[bytes] = [data[: len(MAGIC)]]
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
