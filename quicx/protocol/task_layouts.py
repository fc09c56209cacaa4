"""
The common TASK's layouts: a worker's every delivery read in one unpack.

A daemon delivers most tasks with the same context, a fencing token and a
lease alone, and a worker gets those of a few queues and types: for each
queue and type, the fields around them lie at the same offsets every time.
L{TaskLayouts} learns the layout of a queue and type from a TASK read field
by field (L{quicx.protocol.taskflow.decode_task_fully}, the reference) and
reads the next ones by it, in one C{struct} call, when their context is
that one; any other is left to the reference.
"""

from __future__ import annotations

import struct
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])

_Layout = tuple[struct.Struct, str, bytes, int]
_new = tuple.__new__


class TaskLayouts(Generic[T]):
    """
    The layouts learned, by the bytes of their queue and type
    (C{[len][queue][len][type]}): the struct of the fields around them (the
    task's fixed fields, then the context's length and items), the queue,
    the type, and where the payload starts.

    @ivar kind: the task's named tuple (L{quicx.protocol.taskflow.Task}).
    @ivar items: the context's length (C{context}), the token's tag and
        size (8), as the layout reads them: one u32.
    @ivar lease: the lease's tag and size (4), as one u16.
    @ivar limit: the most layouts kept.
    """

    def __init__(
        self, kind: type[T], context: int, token_tag: int, lease_tag: int, limit: int
    ) -> None:
        self.kind = kind
        self.items = (context << 16) | (token_tag << 8) | 8
        self.lease = (lease_tag << 8) | 4
        self.limit = limit
        self._layouts: dict[bytes, _Layout] = {}

    def __contains__(self, middle: bytes) -> bool:
        return middle in self._layouts

    def learn(self, payload: bytes, task: T) -> T:
        """C{task}, read field by field from C{payload}: the layout of its queue and type kept."""
        if len(self._layouts) < self.limit:
            queue_end = 16 + payload[15]
            middle = payload[15 : queue_end + 1 + payload[queue_end]]
            if middle not in self._layouts:
                head = struct.Struct(f">IHBQ{len(middle)}xIQHI")
                self._layouts[middle] = (head, task[3], task[1], head.size)
        return task

    def read(self, payload: bytes) -> T | None:
        """A TASK's task, read by its layout: known, and its context the common one."""
        if len(payload) > 16:
            type_at = 16 + payload[15]
            if type_at < len(payload):
                layout = self._layouts.get(payload[15 : type_at + 1 + payload[type_at]])
                if layout is not None and len(payload) >= layout[3]:
                    head, queue, task_type, start = layout
                    task_id, attempt, priority, enqueued_ms, items, token, lease, lease_ms = (
                        head.unpack_from(payload)
                    )
                    if items == self.items and lease == self.lease:
                        # The named tuple's own __new__ is a Python call: skipped.
                        return _new(
                            self.kind,
                            (
                                task_id,
                                task_type,
                                payload[start:],
                                queue,
                                priority,
                                attempt,
                                enqueued_ms,
                                None,
                                None,
                                token,
                                lease_ms,
                                0,
                                0,
                                None,
                                None,
                                None,
                            ),
                        )
        return None
