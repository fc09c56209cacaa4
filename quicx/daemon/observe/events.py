"""
Task lifecycle events: one JSON line per step of every task's life.

    [events]
    directory = /var/lib/quicx/events
    max_bytes = 64M        # start a new file past this size...
    max_age = 3600         # ...or this age (seconds)

Each record is one line of JSON::

    {"v": 3, "t": 1795284911827, "event": "dispatched", "task": 42,
     "type": "send_email", "size": 118, "producer": 3, "worker": 7,
     "attempt": 1, "queue": "mail", "priority": 5}

with C{event} one of L{quicx.protocol.monitor.EVENT_KINDS}: submitted,
rejected (with C{code} and C{reason}), dispatched, progress (with
C{fraction}, 0 to 1, and C{message}), done, failed (with C{reason}),
retrying (with C{reason}), requeued (with C{cause}), cancelled (with
C{cause}), dead (with C{reason}), replayed, dropped (with C{cause}),
expired (with C{reason}), debounced (with C{mode}), moved (with C{from},
the queue it left) and recovered.  A delayed task's submitted and recovered events add C{due}
(epoch milliseconds); the others' have none.
C{queue} and C{priority} are C{null} on a rejected SUBMIT.  C{t} is epoch
milliseconds; C{producer} and C{worker} are connection ids (C{null} when not
known: a task recovered from the journal has no producer); C{attempt} counts
deliveries; C{v} is the schema's version (L{EVENTS_SCHEMA}: each line
says it, as the live stream's lines are the same and have no file to head).

The daemon's L{quicx.daemon.observe.eventbus.EventBus} gathers the events and hands
them to the L{EventLog} once a second (sooner when many are waiting, or
while live subscribers watch); the log gives them to a thread of its own,
which formats the lines and writes them, so the reactor never waits for the
disk.  Files are named C{events-<start time>-<pid>-<sequence>.ndjson} and rotated
by size and age; with C{compress = gzip}, each file is compressed once a
newer one starts, by a thread of its own (L{gzip_file}), so neither the
reactor nor the writing waits for it.  Everything handed to it is written,
and every rotated file compressed, when the daemon stops; the file open at
the stop stays plain.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import time
from collections.abc import Iterable
from enum import Enum
from typing import Any

from attrs import field, frozen
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from quicx.daemon.queue.policy import SubscriberLimits
from quicx.net.twisted_types import Service
from quicx.protocol.monitor import EVENTS_SCHEMA

Event = tuple[Any, ...]
"""(time, event, task id, type, size, producer id, worker id, attempt, extra, queue, priority)."""

_EXTRA_KEY: dict[str, str | tuple[str, ...]] = {
    "submitted": "due",
    "recovered": "due",
    "rejected": ("code", "reason"),
    "progress": ("fraction", "message"),
    "failed": "reason",
    "requeued": "cause",
    "dropped": "cause",
    "cancelled": "cause",
    "retrying": "reason",
    "dead": "reason",
    "expired": "reason",
    "debounced": "mode",
    "moved": "from",
}


class Compression(Enum):
    """What becomes of an events file once a newer one starts."""

    NONE = "none"
    GZIP = "gzip"


@frozen
class EventSettings:
    """
    The C{[events]} section: the event files (none without a C{directory})
    and the limits on live subscribers.
    """

    directory: str = ""
    max_bytes: int = 64 << 20
    max_age: float = 3600.0
    compress: Compression = Compression.NONE
    subscribers: SubscriberLimits = field(factory=SubscriberLimits)


_type_json: dict[bytes, str] = {}
_Template = tuple[str, str, str]
_templates: dict[tuple[str, bytes, str | None], _Template] = {}
_CACHED = 10_000
"""The most task types, and (kind, task type, queue) templates, kept encoded."""
_HEAD = f'{{"v":{EVENTS_SCHEMA},"t":'
"""Every line's start: the schema's version, then the time."""
_SMALL = tuple(str(number) for number in range(1024))
"""The text of the small numbers an event's line says (sizes, connection
ids, attempts, priorities), made once: an C{int}'s C{str} is most of a
line's cost."""
GZIP_LEVEL = 6
"""zlib's own default: most of level 9's gain at a fraction of its time."""


def _json_type(task_type: bytes) -> str:
    # Task types repeat: each is JSON-encoded once.
    encoded = _type_json.get(task_type)
    if encoded is None:
        encoded = json.dumps(task_type.decode("utf-8", "replace"), ensure_ascii=False)
        if len(_type_json) < _CACHED:
            _type_json[task_type] = encoded
    return encoded


def _template(kind: str, task_type: bytes, queue: str | None) -> _Template:
    """
    The text of a C{kind} event's line that its kind, task type and queue
    make: before its task id, before its size, before its priority.
    """
    key = (kind, task_type, queue)
    template = _templates.get(key)
    if template is None:
        queue_json = "null" if queue is None else f'"{queue}"'  # queue names need no escaping
        template = (
            f',"event":"{kind}","task":',
            f',"type":{_json_type(task_type)},"size":',
            f',"queue":{queue_json},"priority":',
        )
        if len(_templates) < _CACHED:
            _templates[key] = template
    return template


def _extra_fields(kind: str, extra: Any) -> str:
    """The fields an event's C{extra} adds, and the closing brace."""
    keys = _EXTRA_KEY[kind]
    if isinstance(keys, tuple):
        # Several fields: the extra is their values, in order.
        fields = "".join(
            f',"{key}":{json.dumps(value, ensure_ascii=False)}'
            for key, value in zip(keys, extra, strict=True)
        )
        return f"{fields}}}"
    return f',"{keys}":{json.dumps(extra, ensure_ascii=False)}}}'


def format_events(events: Iterable[Event]) -> list[str]:
    """
    Each record as its JSON line (without the newline).  Built from a
    template per kind, task type and queue, not with C{json.dumps} per
    record, and in one loop: this runs for every event, in the daemon's
    process, thousands at a time.
    """
    lines: list[str] = []
    add = lines.append
    templates = _templates
    small = _SMALL
    last_ms, start = -1, ""  # the line's start up to its time: events come in time order
    for event in events:
        when, kind, task_id, task_type, size, producer, worker, attempt, extra, queue, priority = (
            event
        )
        task, size_field, priority_field = templates.get((kind, task_type, queue)) or _template(
            kind, task_type, queue
        )
        ms = int(when * 1000)
        if ms != last_ms:
            last_ms, start = ms, f"{_HEAD}{ms}"
        by = "null" if producer is None else small[producer] if producer < 1024 else producer
        to = "null" if worker is None else small[worker] if worker < 1024 else worker
        add(
            f"{start}{task}{'null' if task_id is None else task_id}"
            f"{size_field}{small[size] if size < 1024 else size}"
            f',"producer":{by},"worker":{to}'
            f',"attempt":{small[attempt] if attempt < 1024 else attempt}'
            f"{priority_field}{'null' if priority is None else small[priority]}"
            f"{'}' if extra is None else _extra_fields(kind, extra)}"
        )
    return lines


def format_event(event: Event) -> str:
    """One record as its JSON line (without the newline): see L{format_events}."""
    return format_events((event,))[0]


def gzip_file(path: str) -> str:
    """
    Compress the file at C{path} into C{path + ".gz"} and remove it; the
    new file's path.  The C{.gz} appears whole: it is written under a
    hidden name (a leading dot, which Spark and Hadoop skip) and renamed.
    """
    directory, name = os.path.split(path)
    part = os.path.join(directory, f".{name}.gz")
    try:
        with open(path, "rb") as source, open(part, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL) as target:
                shutil.copyfileobj(source, target, 1 << 20)
            raw.flush()
            os.fsync(raw.fileno())  # whole on disk before it takes the plain file's place
        os.replace(part, path + ".gz")
    except BaseException:
        # A full disk, say: the part would hold the space the plain file needs.
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise
    os.unlink(path)
    return path + ".gz"


def remove_compressed_twins(directory: str) -> list[str]:
    """
    Remove each C{events-*.ndjson} of C{directory} that has its C{.gz}
    beside it: a daemon stopped between the two steps of L{gzip_file} left
    it, and the report would count its events twice.  The C{.gz} is whole
    (it took its name last).  Remove too each part (C{.events-*.ndjson.gz})
    a daemon stopped while compressing left: its plain file is whole.  The
    paths removed.
    """
    names = set(os.listdir(directory))
    twins = sorted(
        os.path.join(directory, name)
        for name in names
        if (name.startswith("events-") and name.endswith(".ndjson") and f"{name}.gz" in names)
        or (name.startswith(".events-") and name.endswith(".ndjson.gz"))
    )
    for path in twins:
        os.unlink(path)
    return twins


class EventLog(Service):
    """
    Writes the lifecycle events handed to it (L{take}) as rotated NDJSON files.

    @ivar written: events written so far.
    @ivar broken: why writing stopped (an I/O error), or C{""}.
    """

    log = Logger()

    def __init__(self, settings: EventSettings, reactor: Any) -> None:
        self.settings = settings
        self.reactor = reactor
        self.written = 0
        self.broken = ""
        # Events taken while a write was in flight: they go with the next.
        self._buffer: list[Event] = []
        # The write in flight (its result goes to its callbacks).
        self._job: Deferred[Any] | None = None
        self._threads = ThreadPool(1, 1, name="quicx-events")
        # Rotated files being compressed, by a thread of their own.
        self._compressor = ThreadPool(1, 1, name="quicx-events-gzip")
        self._compressing: set[Deferred[Any]] = set()
        self._file: Any = None
        self._path = ""
        self._rotated: list[str] = []
        self._file_bytes = 0
        self._file_opened = 0.0
        self._sequence = 0

    def take(self, events: list[Event]) -> None:
        """Write C{events}, after those taken before (in the writer thread)."""
        if self.broken:
            return
        self._buffer += events
        self._flush()

    # -- writing ---------------------------------------------------------------------

    def _flush(self) -> None:
        if self._job is not None or not self._buffer or self.broken:
            return
        events, self._buffer = self._buffer, []
        self._job = deferToThreadPool(self.reactor, self._threads, self._write, events)
        self._job.addCallbacks(self._written, self._failed)

    def _written(self, result: tuple[int, list[str]]) -> None:
        count, rotated = result
        self._job = None
        self.written += count
        for path in rotated:
            self._compress(path)
        self._flush()  # what was taken meanwhile

    def _failed(self, failure: Failure) -> None:
        self._job = None
        self.broken = failure.getErrorMessage()
        self._buffer = []
        self.log.error(
            "events: writing to {directory} failed ({reason}); no more events are recorded",
            log_id="events.broken",
            directory=self.settings.directory,
            reason=self.broken,
        )

    def _compress(self, path: str) -> None:
        """Compress the rotated file at C{path}, if the settings say so (in its thread)."""
        if self.settings.compress is Compression.NONE:
            return
        job = deferToThreadPool(self.reactor, self._compressor, gzip_file, path)
        self._compressing.add(job)
        job.addErrback(self._not_compressed, path)
        job.addBoth(lambda _: self._compressing.discard(job))

    def _not_compressed(self, failure: Failure, path: str) -> None:
        self.log.error(
            "events: compressing {path} failed ({reason}); it stays as it was",
            log_id="events.not_compressed",
            path=path,
            reason=failure.getErrorMessage(),
        )

    def _write(self, events: list[Event]) -> tuple[int, list[str]]:
        """
        (Writer thread.) Format and append C{events}, rotating as needed;
        how many, and the files closed meanwhile.
        """
        settings = self.settings
        if self._file is None or time.time() - self._file_opened >= settings.max_age:
            self._rotate()
        chunk: list[bytes] = []
        room = settings.max_bytes - self._file_bytes
        for text in format_events(events):
            line = (text + "\n").encode("utf-8")
            if len(line) > room and (chunk or self._file_bytes):
                self._append(chunk)
                self._rotate()
                chunk, room = [], settings.max_bytes
            chunk.append(line)
            room -= len(line)
        self._append(chunk)
        self._file.flush()
        rotated, self._rotated = self._rotated, []
        return len(events), rotated

    def _append(self, lines: list[bytes]) -> None:
        data = b"".join(lines)
        self._file.write(data)
        self._file_bytes += len(data)

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
            self._rotated.append(self._path)
        self._sequence += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        name = f"events-{stamp}-{os.getpid()}-{self._sequence:04d}.ndjson"
        self._path = os.path.join(self.settings.directory, name)
        self._file = open(self._path, "ab")  # noqa: SIM115
        self._file_bytes = 0
        self._file_opened = time.time()

    # -- service ------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        os.makedirs(self.settings.directory, exist_ok=True)
        for path in remove_compressed_twins(self.settings.directory):
            self.log.info(
                "events: removed {path}, {why}",
                log_id="events.twin_removed",
                path=path,
                why="a part of a compression the daemon stopped"
                if os.path.basename(path).startswith(".")
                else "already compressed by the daemon before",
            )
        self._threads.start()
        self._compressor.start()

    def stopService(self) -> Deferred[None]:
        super().stopService()
        return Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        """Write everything taken, close the file, finish compressing, stop the threads."""
        try:
            while self._job is not None or (self._buffer and not self.broken):
                if self._job is None:
                    self._flush()
                if self._job is not None:
                    await self._job
            if self._file is not None:
                await deferToThreadPool(self.reactor, self._threads, self._file.close)
                self._file = None
            await gatherResults(list(self._compressing))
        finally:
            self._threads.stop()
            self._compressor.stop()
