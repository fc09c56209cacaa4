"""
Version 2's task messages: SUBMIT and its options, OK, READY, TASK, DONE.

A producer's SUBMIT (its options ride in a TLV field, so later releases add
options without a new version) and the OK that answers it; a worker's READY
and the TASK the daemon delivers, with its context (keys, the delivery's
fencing token and lease, its retries); DONE, which tells a producer its task
is done, with the worker's L{Result}.  The fenced reports that finish a
delivery are in L{quicx.protocol.outcomes}.  docs/protocol.md has every
layout; this module is their one implementation, shared by the daemon, the
clients and the tests.  Sans I/O.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, NamedTuple

from attrs import field, frozen

from quicx.protocol import parents as deps
from quicx.protocol import start_options, wire
from quicx.protocol.backoff import _BACKOFF
from quicx.protocol.backoff import Backoff as Backoff
from quicx.protocol.backoff import BackoffKind as BackoffKind
from quicx.protocol.backoff import decode_backoff as decode_backoff
from quicx.protocol.backoff import encode_backoff as encode_backoff
from quicx.protocol.codec import (
    CACHE_SIZE,
    HEADER,
    HEADER_AND_ID,
    HEADER_ID_BYTE,
    MAX_CREDITS,
    MAX_TASK_ID,
    MAX_TYPE_LENGTH,
    TASK_ID,
    U16,
    U64,
    VERSION,
    MessageType,
    bad,
    check_queue,
    chunked,
    frame,
    joined,
    name_field,
    name_list,
    option,
    queue_name,
    split_name,
    split_type,
    tlv,
)
from quicx.protocol.task_layouts import TaskLayouts
from quicx.protocol.tracecontext import trace_problem

MAX_OPTIONS = 4096
"""The most bytes a SUBMIT's options may take."""
MAX_SUBSCRIPTIONS = 32
"""The most queues one READY may list."""
SUBMIT_OVERHEAD = 1 + MAX_TYPE_LENGTH + 2 + MAX_OPTIONS
"""The most bytes a v2 SUBMIT spends before its payload."""
MAX_TASK_CONTEXT = 0xFFFF
"""The most bytes a TASK's context may take (its length is a u16)."""

_TASK_HEAD = struct.Struct(">BBIIHBQ")  # header, then task id, attempt, priority, enqueued ms


class Option(IntEnum):
    """SUBMIT option tags (and TASK context tags)."""

    QUEUE = 0x01
    PRIORITY = 0x02
    KEY = 0x03
    FAIRNESS = 0x04
    DELAY = 0x05
    RUN_AT = 0x06
    RETRIES = 0x07
    BACKOFF = 0x08
    # Part 3: results, progress and groups (quicx.protocol.outcomes).
    RESULT = 0x09
    PROGRESS = 0x0A
    GROUP = 0x0B
    # The producer's trace context (W3C Trace Context): L{check_trace}.
    TRACE = 0x0C
    AFTER = deps.AFTER
    ON_PARENT_FAILURE = deps.ON_PARENT_FAILURE
    AFTER_GROUP = deps.AFTER_GROUP
    # When it may start: L{quicx.protocol.start_options}.
    DEBOUNCE = 0x10
    EXPIRES = 0x11


class Context(IntEnum):
    """
    The TLV tags a TASK's context adds to the SUBMIT option tags it repeats:
    CHECKPOINT's items repeat (L{quicx.protocol.checkpoints}).
    """

    TOKEN = 0x20
    LEASE = 0x21
    RETRIES = 0x22
    CHECKPOINT = 0x24


class ResultKind(IntEnum):
    """How a result's bytes are read: the value a handler returned, restored."""

    BYTES = 1
    TEXT = 2
    JSON = 3


MAX_RETRIES = 0xFFFF
"""The most retries a task may ask for."""


OK_DUPLICATE = 0x01
"""OK flag: the SUBMIT's key matched a task submitted before; this is its id."""


# -- messages ---------------------------------------------------------------------


@frozen(cache_hash=True)
class SubmitOptions:
    """
    A SUBMIT's options, as the wire carries them: the one value a client
    builds and this codec encodes (L{encode}); a new option is a field
    here and its tag (L{Option}).  Each C{None} (or C{False}) is absent.

    @ivar key: the idempotency key; C{fairness}: the fairness key.
    @ivar delay_ms: run it this many milliseconds from now; C{run_at_ms}:
        at this time (milliseconds since the Unix epoch); at most one.
    @ivar result_ttl: keep the outcome and result this many seconds (0: the
        daemon's default).
    @ivar progress: forward the task's progress reports to the producer.
    @ivar group: the group it joins.
    @ivar trace: the producer's trace context (see
        L{quicx.protocol.tracecontext.trace_problem}), which the task's
        deliveries carry to its worker.
    @ivar debounce: its key's debounce (with a key, no delay); C{expires}: its deadline to start.
    @ivar routing_only: no option but a queue and a priority is given (made
        from the others, not an option: the daemon's SUBMIT path reads no
        other then).
    @ivar timed: a delay or a deadline to start, and no option but those, a
        queue and a priority (made from the others: the daemon's plain path too).
    """

    queue: str | None = None
    priority: int | None = None
    key: bytes | None = None
    fairness: bytes | None = None
    delay_ms: int | None = None
    run_at_ms: int | None = None
    retries: int | None = None
    backoff: Backoff | None = None
    result_ttl: int | None = None
    progress: bool = False
    group: int | None = None
    trace: bytes | None = None
    after: tuple[int, ...] | None = None
    on_parent_failure: int | None = None
    after_group: int | None = None
    debounce: start_options.Debounce | None = None
    expires: start_options.Expires | None = None
    routing_only: bool = field(init=False, repr=False, eq=False)
    timed: bool = field(init=False, repr=False, eq=False)

    @routing_only.default
    def _routing_only(self) -> bool:
        return self.delay_ms is None and self.expires is None and self._no_other()

    @timed.default
    def _timed(self) -> bool:
        return not self.routing_only and self._no_other()

    def _no_other(self) -> bool:  # (no option but a queue, a priority, a delay, a deadline)
        others: tuple[object, ...] = (self.key, self.fairness, self.run_at_ms, self.retries)
        others += (self.backoff, self.result_ttl, self.group, self.trace, self.after)
        others += (self.after_group, self.debounce)
        return others == (None,) * 11 and not self.progress

    def encode(self) -> bytes:
        """
        The options field of a SUBMIT (without its length).

        @raise ValueError: an option is out of range.
        """
        options = b""
        if self.queue is not None:
            options += option(Option.QUEUE, check_queue(self.queue))
        priority = self.priority
        if priority is not None:
            if not 0 <= priority <= 255:
                raise ValueError(f"a priority is 0 to 255, not {priority}")
            options += bytes((Option.PRIORITY, 1, priority))
        if self.key is not None:
            options += option(Option.KEY, self.key)
        if self.fairness is not None:
            options += option(Option.FAIRNESS, self.fairness)
        delay_ms, run_at_ms = self.delay_ms, self.run_at_ms
        if delay_ms is not None and run_at_ms is not None:
            raise ValueError("a task has a delay or a time to run at, not both")
        if delay_ms is not None:
            if not 0 <= delay_ms <= 0xFFFFFFFF:
                raise ValueError(f"a delay is 0 to {0xFFFFFFFF} ms, not {delay_ms}")
            options += bytes((Option.DELAY, 4)) + TASK_ID.pack(delay_ms)
        if run_at_ms is not None:
            if not 0 <= run_at_ms < 1 << 64:
                raise ValueError(f"a time to run at is a u64 of milliseconds, not {run_at_ms}")
            options += bytes((Option.RUN_AT, 8)) + U64.pack(run_at_ms)
        retries = self.retries
        if retries is not None:
            if not 0 <= retries <= MAX_RETRIES:
                raise ValueError(f"retries are 0 to {MAX_RETRIES}, not {retries}")
            options += bytes((Option.RETRIES, 2)) + U16.pack(retries)
        if self.backoff is not None:
            options += bytes((Option.BACKOFF, _BACKOFF.size)) + encode_backoff(self.backoff)
        result_ttl = self.result_ttl
        if result_ttl is not None:
            if not 0 <= result_ttl <= 0xFFFFFFFF:
                raise ValueError(f"a result TTL is 0 to {0xFFFFFFFF} s, not {result_ttl}")
            options += bytes((Option.RESULT, 4)) + TASK_ID.pack(result_ttl)
        if self.progress:
            options += bytes((Option.PROGRESS, 1, 1))
        group = self.group
        if group is not None:
            if not 1 <= group <= MAX_TASK_ID:
                raise ValueError(f"a group id is 1 to {MAX_TASK_ID}, not {group}")
            options += bytes((Option.GROUP, 4)) + TASK_ID.pack(group)
        trace = self.trace
        if trace is not None:
            problem = trace_problem(trace)
            if problem:
                raise ValueError(f"a trace {problem}")
            options += bytes((Option.TRACE, len(trace))) + trace
        if (self.after, self.after_group, self.on_parent_failure) != (None, None, None):
            options += deps.encode_dependency_options(
                self.after, self.on_parent_failure, self.after_group
            )
        if self.debounce is not None or self.expires is not None:
            options += start_options.encode_start_options(self)
        return options


DEFAULT_OPTIONS = SubmitOptions()
"""No option: a version-1 SUBMIT's, and a version-2 SUBMIT's without any (one shared value)."""


class Submit(NamedTuple):
    """
    A SUBMIT: the task's type and payload, and its L{SubmitOptions}.  (A
    named tuple: the daemon decodes one per task.)
    """

    task_type: bytes
    payload: bytes
    options: SubmitOptions = DEFAULT_OPTIONS


class Result(NamedTuple):
    """A task's result: C{data}, read as C{kind} says."""

    kind: ResultKind
    data: bytes

    @classmethod
    def of(cls, value: object) -> Result:
        """
        A handler's return value as a result: bytes as they are, a string
        as UTF-8 text, anything else as JSON.

        @raise TypeError: C{value} is not bytes, a string, or JSON-serialisable.
        """
        if isinstance(value, bytes | bytearray | memoryview):
            return cls(ResultKind.BYTES, bytes(value))
        if isinstance(value, str):
            try:
                return cls(ResultKind.TEXT, value.encode("utf-8"))
            except UnicodeEncodeError as e:
                # Lone surrogates: from os.fsdecode() of a name that is not UTF-8.
                raise TypeError(f"a text result must be valid Unicode ({e})") from None
        try:
            text = json.dumps(value, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"a result is bytes, a string or JSON-serialisable, not {type(value).__name__}"
                f" ({e})"
            ) from None
        return cls(ResultKind.JSON, text.encode("utf-8"))

    def value(self) -> Any:
        """The value again: bytes, a string, or what the JSON holds."""
        if self.kind == ResultKind.BYTES:
            return self.data
        text = self.data.decode("utf-8")
        return text if self.kind == ResultKind.TEXT else json.loads(text)

    def encode(self) -> bytes:
        """C{[kind u8][data]}, the tail of an ACK, a DONE or an OUTCOME."""
        return bytes((self.kind,)) + self.data


_RESULT_KINDS = {kind.value: kind for kind in ResultKind}


def decode_result(message_type: int, payload: bytes, start: int) -> Result | None:
    """The C{[kind u8][data]} result at C{payload[start:]}; C{None} if there is none."""
    if len(payload) <= start:
        return None
    kind = _RESULT_KINDS.get(payload[start])
    if kind is None:
        raise bad(message_type, f"has unknown result kind 0x{payload[start]:02x}")
    data = payload[start + 1 :]
    if kind is not ResultKind.BYTES:
        try:
            text = data.decode("utf-8")
            if kind is ResultKind.JSON:
                json.loads(text)
        except (ValueError, RecursionError):
            # RecursionError: JSON nested deeper than the interpreter can parse.
            raise bad(message_type, f"result is not {kind.name}") from None
    return Result(kind, data)


class Done(NamedTuple):
    """(To a producer.) Task C{task_id} is done; its C{result}, if the worker gave one."""

    task_id: int
    result: Result | None = None


class Ok(NamedTuple):
    """(A named tuple, not an attrs class: a client decodes one per task.)"""

    task_id: int
    duplicate: bool = False


@frozen
class Ready:
    """C{queues}: the new subscription, in order; empty keeps the current one."""

    credits: int = 1
    queues: tuple[str, ...] = ()


class Task(NamedTuple):
    """
    A task as a v2 worker gets it: the task and its context.  (A named
    tuple: a worker decodes one per task, and a tuple is built in C.)

    @ivar token: the delivery's fencing token, quoted by ACK, NACK and TOUCH
        (0 from a daemon of part 1, which sends none).
    @ivar lease_ms: how long the worker may hold it before it is taken back
        (0: no limit), unless a TOUCH extends it.
    @ivar failures: the failed attempts before this one; C{retries}: how
        many the task may have retried.
    @ivar trace: its producer's trace context (L{SubmitOptions.trace}), if any.
    @ivar checkpoint: the last state a delivery of it saved (CHECKPOINT), if any.
    @ivar parents: its parents' outcomes, when it waited for others.
    """

    task_id: int
    task_type: bytes
    payload: bytes
    queue: str
    priority: int
    attempt: int
    enqueued_ms: int
    key: bytes | None = None
    fairness: bytes | None = None
    token: int = 0
    lease_ms: int = 0
    failures: int = 0
    retries: int = 0
    trace: bytes | None = None
    checkpoint: Result | None = None
    parents: deps.Parents | None = None


Message = Submit | Ok | Ready | Task | Done


# -- encoders ---------------------------------------------------------------------

# The encoders of each task's frames (OK, TASK, DONE) take plain ints: an
# IntEnum member costs an attribute lookup and __index__.
_OK = int(MessageType.OK)
_TASK = int(MessageType.TASK)
_DONE = int(MessageType.DONE)
_TOKEN = int(Context.TOKEN)
_LEASE = int(Context.LEASE)


def submit_options(*fields: Any, **named: Any) -> bytes:
    """The options field of a SUBMIT: L{SubmitOptions} of C{fields}, encoded."""
    return SubmitOptions(*fields, **named).encode()


def encode_submit(task_type: bytes, payload: bytes, options: bytes = b"") -> bytes:
    """A SUBMIT; C{options} from L{submit_options} (empty: none)."""
    if not 0 < len(task_type) <= MAX_TYPE_LENGTH:
        raise ValueError(f"a task type is 1 to {MAX_TYPE_LENGTH} bytes, not {len(task_type)}")
    if len(options) > MAX_OPTIONS:
        raise ValueError(f"options are at most {MAX_OPTIONS} bytes, not {len(options)}")
    head = bytes((len(task_type),)) + task_type + U16.pack(len(options)) + options
    return HEADER.pack(VERSION, MessageType.SUBMIT, len(head) + len(payload)) + head + payload


def encode_ok(task_id: int, duplicate: bool = False) -> bytes:
    return HEADER_ID_BYTE.pack(VERSION, _OK, 5, task_id, OK_DUPLICATE if duplicate else 0)


def encode_ready(credits: int = 1, queues: Sequence[str] = ()) -> bytes:
    if not 1 <= credits <= MAX_CREDITS:
        raise ValueError(f"READY credits are 1 to {MAX_CREDITS}, not {credits}")
    if not queues:
        return frame(MessageType.READY, U16.pack(credits))
    if len(queues) > MAX_SUBSCRIPTIONS:
        raise ValueError(f"a READY lists at most {MAX_SUBSCRIPTIONS} queues, not {len(queues)}")
    body = U16.pack(credits) + bytes((len(queues),)) + b"".join(name_field(q) for q in queues)
    return frame(MessageType.READY, body)


_DELIVERY = struct.Struct(">BBQBBI")  # token and lease items


def task_context(
    key: bytes | None,
    fairness: bytes | None,
    token: int = 0,
    lease_ms: int = 0,
    failures: int = 0,
    retries: int = 0,
    trace: bytes | None = None,
    checkpoint: Result | None = None,
    parents: bytes | None = None,
) -> bytes:
    """
    The TLV context a TASK carries after its type: the keys, then the
    delivery's token and lease (when it has a token), then its retries
    (when it may retry), then its producer's trace context (when it has
    one), then its last checkpoint (when it has one), then its parents'
    outcomes (items made by L{deps.encode_parents}).
    """
    context = b""
    if key is not None:
        context += bytes((Option.KEY, len(key))) + key
    if fairness is not None:
        context += bytes((Option.FAIRNESS, len(fairness))) + fairness
    if token:
        context += _DELIVERY.pack(Context.TOKEN, 8, token, Context.LEASE, 4, lease_ms)
    if retries:
        context += bytes((Context.RETRIES, 4)) + U16.pack(failures) + U16.pack(retries)
    if trace is not None:
        context += bytes((Option.TRACE, len(trace))) + trace
    if checkpoint is not None:
        context += chunked(Context.CHECKPOINT, checkpoint.encode())
    if parents is not None:
        context += parents
    return context


_TASK_MIDDLES: dict[tuple[bytes, bytes], bytes] = {}


def encode_task(
    task_id: int,
    task_type: bytes,
    payload: bytes,
    queue_header: bytes,
    priority: int,
    attempt: int,
    enqueued_ms: int,
    context: bytes = b"",
) -> bytes:
    """
    A TASK.  C{queue_header}: C{[len u8][name]} (the daemon keeps it per
    queue); C{context}: from L{task_context}.
    """
    # Queue and type repeat from task to task: their bytes are made once.
    middle = _TASK_MIDDLES.get((queue_header, task_type))
    if middle is None:
        middle = queue_header + bytes((len(task_type),)) + task_type
        if len(_TASK_MIDDLES) < CACHE_SIZE:
            _TASK_MIDDLES[(queue_header, task_type)] = middle
    if context:
        tail = middle + U16.pack(len(context)) + context + payload
    else:
        tail = middle + b"\x00\x00" + payload
    return (
        _TASK_HEAD.pack(
            VERSION,
            MessageType.TASK,
            15 + len(tail),
            task_id,
            min(attempt, 0xFFFF),
            priority,
            enqueued_ms,
        )
        + tail
    )


_DELIVERY_LAYOUTS: dict[tuple[bytes, bytes], tuple[struct.Struct, bytes, int]] = {}


def encode_delivery(  # noqa: PLR0913
    task_id: int,
    task_type: bytes,
    payload: bytes,
    queue_header: bytes,
    priority: int,
    attempt: int,
    enqueued_ms: int,
    key: bytes | None,
    fairness: bytes | None,
    token: int,
    lease_ms: int,
    failures: int,
    retries: int,
    trace: bytes | None = None,
    checkpoint: Result | None = None,
    parents: bytes | None = None,
) -> bytes:
    """
    A TASK as the daemon delivers it: L{encode_task} with the context
    L{task_context} makes of these fields.  The common context, a token and
    a lease alone, is packed with the header, the queue and the type in one
    call (a layout made once per queue and type).
    """
    if (
        not token
        or key is not None
        or fairness is not None
        or retries
        or trace
        or checkpoint
        or parents
    ):
        context = task_context(
            key, fairness, token, lease_ms, failures, retries, trace, checkpoint, parents
        )
        return encode_task(
            task_id, task_type, payload, queue_header, priority, attempt, enqueued_ms, context
        )
    layout = _DELIVERY_LAYOUTS.get((queue_header, task_type))
    if layout is None:
        middle = queue_header + bytes((len(task_type),)) + task_type
        layout = (
            struct.Struct(f">BBIIHBQ{len(middle)}sHBBQBBI"),
            middle,
            _TASK_HEAD.size - HEADER.size + len(middle) + 2 + _DELIVERY.size,
        )
        if len(_DELIVERY_LAYOUTS) < CACHE_SIZE:
            _DELIVERY_LAYOUTS[(queue_header, task_type)] = layout
    head, middle, length = layout
    return (
        head.pack(
            VERSION,
            _TASK,
            length + len(payload),
            task_id,
            min(attempt, 0xFFFF),
            priority,
            enqueued_ms,
            middle,
            _DELIVERY.size,
            _TOKEN,
            8,
            token,
            _LEASE,
            4,
            lease_ms,
        )
        + payload
    )


def encode_done(task_id: int, result: Result | None = None) -> bytes:
    if result is None:
        return HEADER_AND_ID.pack(VERSION, _DONE, 4, task_id)
    kind, data = result
    # One copy of the result: it may be the largest part of the frame.
    return HEADER_ID_BYTE.pack(VERSION, _DONE, 5 + len(data), task_id, kind) + data


def encode_failed(task_id: int, reason: str | bytes) -> bytes:
    if isinstance(reason, str):
        reason = reason.encode("utf-8", "replace")
    return frame(MessageType.FAILED, TASK_ID.pack(task_id) + reason)


WAIT_FRAME = frame(MessageType.WAIT)


# -- decoders ---------------------------------------------------------------------


_OPTIONS: dict[bytes, SubmitOptions] = {}
"""SUBMIT options decoded before, of the kinds the daemon's plain path takes: they repeat."""
_REPEATED: dict[bytes, SubmitOptions] = {}
"""SUBMIT options already decoded that repeat from task to task (no key, time
to run at or group)."""


def submit_fields(payload: bytes) -> tuple[bytes, bytes, SubmitOptions] | None:
    """
    A SUBMIT's task type, payload and options, without building a
    L{Submit} (the daemon decodes one per task), when it has no option but
    a queue, a priority, a delay and a deadline from now, and they were seen before; C{None}
    otherwise, and for a malformed one: L{decode_submit} then decodes it,
    or says what is wrong.
    """
    size = len(payload)
    type_end = 1 + payload[0] if size else 0
    if not 1 < type_end <= size - 2:
        return None
    start = type_end + 2
    end = start + ((payload[type_end] << 8) | payload[type_end + 1])
    if end == start:
        return payload[1:type_end], payload[start:], DEFAULT_OPTIONS
    known = _OPTIONS.get(payload[start:end]) if end <= size else None
    if known is None:
        return None
    return payload[1:type_end], payload[end:], known


def decode_submit(payload: bytes) -> Submit:
    fields = submit_fields(payload)
    if fields is not None:
        return Submit(*fields)
    type_end, start, end = _submit_layout(payload)
    raw = payload[start:end]
    options = _REPEATED.get(raw)
    if options is None:
        options = decode_options(payload, start, end)
        _remember(raw, options)
    return Submit(payload[1:type_end], payload[end:], options)


def _submit_layout(payload: bytes) -> tuple[int, int, int]:
    """
    Where a SUBMIT's task type ends, and its options start and end (offsets
    into the payload, not slices of it: the payload is copied once).

    @raise MalformedMessage: they do not fit.
    """
    size = len(payload)
    type_end = 1 + payload[0] if size else 0
    if not 1 < type_end <= size:
        split_type(MessageType.SUBMIT, payload, 0)  # raises, saying why
    if size < type_end + 2:
        raise bad(MessageType.SUBMIT, "has no options length")
    options_length = (payload[type_end] << 8) | payload[type_end + 1]
    if options_length > MAX_OPTIONS:
        raise bad(MessageType.SUBMIT, f"options of {options_length} bytes exceed {MAX_OPTIONS}")
    start = type_end + 2
    if start + options_length > size:
        raise bad(MessageType.SUBMIT, f"options of {options_length} bytes run past the payload")
    return type_end, start, start + options_length


def decode_options(payload: bytes, start: int, end: int) -> SubmitOptions:
    """
    The L{SubmitOptions} of a SUBMIT's options field, C{payload[start:end]}:
    each option decoded by its tag's decoder (L{OPTION_DECODERS}).

    @raise MalformedMessage: an option is unknown or malformed.
    """
    named: dict[str, object] = {}
    for tag, value in tlv(MessageType.SUBMIT, payload, start, end).items():
        known = OPTION_DECODERS.get(tag)
        if known is None:
            raise bad(MessageType.SUBMIT, f"has unknown option 0x{tag:02x}")
        field, decode = known
        named[field] = decode(value)
    if "delay_ms" in named and "run_at_ms" in named:
        raise bad(MessageType.SUBMIT, "has both a delay and a time to run at")
    if "on_parent_failure" in named and not named.keys() & {"after", "after_group"}:
        raise bad(MessageType.SUBMIT, "has on-parent-failure without after or after-group")
    start_options.check_debounce(named)
    return SubmitOptions(**named)  # type: ignore[arg-type]


def _remember(raw: bytes, options: SubmitOptions) -> None:
    """Keep C{options}, decoded from C{raw}, if they are of the kind that repeats."""
    # Options of a queue and a priority only, or with a delay or a deadline from now.
    expires = options.expires
    timed = options.timed and (expires is None or not expires.at)
    if (options.routing_only or timed) and len(_OPTIONS) < CACHE_SIZE:
        _OPTIONS[raw] = options
    repeats = (
        options.key is None
        and options.fairness is None
        and options.run_at_ms is None
        and options.group is None
        and options.trace is None
        and options.after is None
        and (options.expires is None or not options.expires.at)
    )
    if repeats and len(_REPEATED) < CACHE_SIZE:
        _REPEATED[raw] = options


def _sized(length: int, what: str) -> Callable[[bytes], bytes]:
    """A check that an option's value is C{length} bytes (C{what} says what it is)."""

    def check(value: bytes) -> bytes:
        if len(value) != length:
            raise bad(MessageType.SUBMIT, f"{what}, not {len(value)}")
        return value

    return check


_PRIORITY = _sized(1, "priority must be 1 byte (0-255)")
_DELAY = _sized(4, "delay must be 4 bytes (ms)")
_RUN_AT = _sized(8, "run-at must be 8 bytes (ms)")
_RETRIES = _sized(2, "retries must be 2 bytes")
_RESULT_TTL = _sized(4, "result TTL must be 4 bytes (s)")
_GROUP = _sized(4, "group must be 4 bytes")


def _not_empty(what: str) -> Callable[[bytes], bytes]:
    def check(value: bytes) -> bytes:
        if not value:
            raise bad(MessageType.SUBMIT, f"has an empty {what}")
        return value

    return check


def _progress(value: bytes) -> bool:
    if value != b"\x01":
        raise bad(MessageType.SUBMIT, "progress option must be the 1-byte value 1")
    return True


def _trace(value: bytes) -> bytes:
    problem = trace_problem(value)
    if problem:
        raise bad(MessageType.SUBMIT, f"trace {problem}")
    return value


def _group(value: bytes) -> int:
    group: int = TASK_ID.unpack(_GROUP(value))[0]
    if not group:
        raise bad(MessageType.SUBMIT, "names group 0")
    return group


OPTION_DECODERS: dict[int, tuple[str, Callable[[bytes], object]]] = {
    Option.QUEUE: ("queue", lambda value: queue_name(MessageType.SUBMIT, value)),
    Option.PRIORITY: ("priority", lambda value: _PRIORITY(value)[0]),
    Option.KEY: ("key", _not_empty("idempotency key")),
    Option.FAIRNESS: ("fairness", _not_empty("fairness key")),
    Option.DELAY: ("delay_ms", lambda value: TASK_ID.unpack(_DELAY(value))[0]),
    Option.RUN_AT: ("run_at_ms", lambda value: U64.unpack(_RUN_AT(value))[0]),
    Option.RETRIES: ("retries", lambda value: U16.unpack(_RETRIES(value))[0]),
    Option.BACKOFF: ("backoff", lambda value: decode_backoff(MessageType.SUBMIT, value)),
    Option.RESULT: ("result_ttl", lambda value: TASK_ID.unpack(_RESULT_TTL(value))[0]),
    Option.PROGRESS: ("progress", _progress),
    Option.GROUP: ("group", _group),
    Option.TRACE: ("trace", _trace),
    Option.AFTER: ("after", deps.decode_after),
    Option.ON_PARENT_FAILURE: ("on_parent_failure", deps.decode_policy),
    Option.AFTER_GROUP: ("after_group", deps.decode_after_group),
    Option.DEBOUNCE: ("debounce", start_options.decode_debounce),
    Option.EXPIRES: ("expires", start_options.decode_expires),
}
"""
Each SUBMIT option's decoder, by tag: the L{SubmitOptions} field it fills
and how its value is read (raising L{MalformedMessage} for a bad one).  A
new option is a field of L{SubmitOptions}, its tag (L{Option}), its
encoding (L{SubmitOptions.encode}) and its line here.
"""


def decode_done(payload: bytes) -> Done:
    if len(payload) < 4:
        raise bad(MessageType.DONE, f"needs a 4-byte task id, got {len(payload)} bytes")
    task_id = TASK_ID.unpack_from(payload)[0]
    if len(payload) == 4:
        return Done(task_id)
    return Done(task_id, decode_result(MessageType.DONE, payload, 4))


def decode_ok(payload: bytes) -> Ok:
    if len(payload) != 5:
        raise bad(MessageType.OK, f"payload must be 5 bytes, got {len(payload)}")
    return Ok(TASK_ID.unpack_from(payload)[0], bool(payload[4] & OK_DUPLICATE))


def decode_ready(payload: bytes) -> Ready:
    if not payload:
        return Ready()
    if len(payload) < 2:
        raise bad(MessageType.READY, "payload must be empty, or start with a 2-byte credit count")
    credits = U16.unpack_from(payload)[0]
    if not credits:
        raise bad(MessageType.READY, "credits must be at least 1")
    if len(payload) == 2:
        return Ready(credits)
    queues = name_list(MessageType.READY, payload, 2, MAX_SUBSCRIPTIONS, "queue", "queue list")
    return Ready(credits, queues)


_TASK_FIXED = struct.Struct(">IHBQ")
# Each of these once; a checkpoint's items repeat (read by joined()).
_CONTEXT_TAGS = frozenset(
    {Option.KEY, Option.FAIRNESS, Option.TRACE, *Context} - {Context.CHECKPOINT}
)
_CONTEXT_SIZES = {Context.TOKEN: 8, Context.LEASE: 4, Context.RETRIES: 4}
_LAYOUTS = TaskLayouts(Task, _DELIVERY.size, Context.TOKEN, Context.LEASE, CACHE_SIZE)


def decode_task(payload: bytes) -> Task:
    """A TASK (L{decode_task_fully}'s): a common delivery of a layout learned, in one unpack."""
    return _LAYOUTS.read(payload) or _LAYOUTS.learn(payload, decode_task_fully(payload))


def decode_task_fully(payload: bytes) -> Task:
    """A TASK, read field by field: any context, every check (the reference of L{decode_task})."""
    size = len(payload)
    if size < 15:
        raise bad(MessageType.TASK, f"needs at least 15 bytes, got {size}")
    task_id, attempt, priority, enqueued_ms = _TASK_FIXED.unpack_from(payload)
    queue, offset = split_name(MessageType.TASK, payload, 15)
    type_end = offset + 1 + payload[offset] if offset < size else offset
    if not offset + 1 < type_end <= size:
        split_type(MessageType.TASK, payload, offset)  # raises, saying why
    if size < type_end + 2:
        raise bad(MessageType.TASK, "has no context length")
    start = type_end + 2
    end = start + ((payload[type_end] << 8) | payload[type_end + 1])
    if end > size:
        raise bad(MessageType.TASK, "context runs past the payload")
    task_type, body = payload[offset + 1 : type_end], payload[end:]
    if end - start == _DELIVERY.size:
        # The common context, a token and a lease alone: one unpack.
        tag, size, token, lease_tag, lease_size, lease_ms = _DELIVERY.unpack_from(payload, start)
        if (tag, size, lease_tag, lease_size) == _DELIVERY_ITEMS:
            fixed = (task_id, task_type, body, queue, priority, attempt, enqueued_ms)
            return Task(*fixed, None, None, token, lease_ms)
    if end == start:
        return Task(task_id, task_type, body, queue, priority, attempt, enqueued_ms)
    items = _context(payload, start, end)
    parents = deps.parents_in(payload, start, end)
    return Task(task_id, task_type, body, queue, priority, attempt, enqueued_ms, *items, parents)


_DELIVERY_ITEMS = (Context.TOKEN, 8, Context.LEASE, 4)


def _context(
    payload: bytes, start: int, end: int
) -> tuple[bytes | None, bytes | None, int, int, int, int, bytes | None, Result | None]:
    """
    A TASK's context items: keys, token, lease (ms), failures, retries,
    trace (as it came: a worker's tracing reads it, or passes it over) and
    checkpoint (its items of tag 0x24, joined).
    """
    token = lease_ms = failures = retries = 0
    context = tlv(MessageType.TASK, payload, start, end, _CONTEXT_TAGS)
    key, fairness = context.get(Option.KEY), context.get(Option.FAIRNESS)
    for tag, size in _CONTEXT_SIZES.items():
        value = context.get(tag)
        if value is not None and len(value) != size:
            raise bad(MessageType.TASK, f"context item 0x{tag:02x} is not {size} bytes")
    if Context.TOKEN in context:
        token = U64.unpack(context[Context.TOKEN])[0]
    if Context.LEASE in context:
        lease_ms = TASK_ID.unpack(context[Context.LEASE])[0]
    if Context.RETRIES in context:
        failures, retries = _TWO_U16.unpack(context[Context.RETRIES])
    saved = joined(payload, start, end, Context.CHECKPOINT)
    checkpoint = None if saved is None else decode_result(MessageType.TASK, saved or b"\0", 0)
    return key, fairness, token, lease_ms, failures, retries, context.get(Option.TRACE), checkpoint


_TWO_U16 = struct.Struct(">HH")


DECODERS: dict[int, Callable[[bytes], Message | wire.Message]] = {
    MessageType.SUBMIT: decode_submit,
    MessageType.OK: decode_ok,
    MessageType.READY: decode_ready,
    MessageType.TASK: decode_task,
    MessageType.DONE: decode_done,
    # As in version 1.
    MessageType.FAILED: wire.decode_failed,
    MessageType.WAIT: wire.decode_wait,
}
