"""
The version-2 codec: every message round-trips through the frame parser
(property-based), the layouts are the page's, and every malformed payload is
refused with a message that says why.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import admin, codec, link, monitor, registry, taskflow, wire
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.frames import Frame, FrameParser, RejectedFrame

queue_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-",
    min_size=1,
    max_size=64,
)
keys = st.binary(min_size=1, max_size=255)
types = st.binary(min_size=1, max_size=255)
payloads = st.binary(max_size=2000)
task_ids = st.integers(0, codec.MAX_TASK_ID)
u16s = st.integers(0, 0xFFFF)
u32s = st.integers(0, 0xFFFFFFFF)
u64s = st.integers(0, 2**64 - 1)


def through_parser(encoded: bytes) -> object:
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    (frame,) = parser.feed(encoded)
    assert isinstance(frame, Frame) and parser.version == 2
    return registry.decode(frame.message_type, frame.payload)


def encode_submit(submit: taskflow.Submit) -> bytes:
    """C{submit}'s frame, its options in the encoder's order."""
    return taskflow.encode_submit(submit.task_type, submit.payload, submit.options.encode())


def encode_task(task: taskflow.Task) -> bytes:
    """The frame of C{task}, as the daemon sends it."""
    context = taskflow.task_context(
        task.key, task.fairness, task.token, task.lease_ms, task.failures, task.retries
    )
    queue = bytes((len(task.queue),)) + task.queue.encode()
    return taskflow.encode_task(
        task.task_id,
        task.task_type,
        task.payload,
        queue,
        task.priority,
        task.attempt,
        task.enqueued_ms,
        context,
    )


def _submit(
    task_type: bytes,
    payload: bytes,
    queue: str | None,
    priority: int | None,
    key: bytes | None,
    fairness: bytes | None,
    when: tuple[int | None, int | None],
    retries: int | None,
    backoff: taskflow.Backoff | None,
) -> taskflow.Submit:
    return taskflow.Submit(
        task_type,
        payload,
        taskflow.SubmitOptions(queue, priority, key, fairness, *when, retries, backoff),
    )


def _task(  # noqa: PLR0913
    task_id: int,
    task_type: bytes,
    payload: bytes,
    queue: str,
    priority: int,
    attempt: int,
    enqueued_ms: int,
    key: bytes | None,
    fairness: bytes | None,
    delivery: tuple[int, int],
    retries: tuple[int, int],
) -> taskflow.Task:
    fields = (task_id, task_type, payload, queue, priority, attempt, enqueued_ms, key, fairness)
    return taskflow.Task(*fields, *delivery, *retries)


backoffs = st.builds(
    lambda kind, bounds, jitter: taskflow.Backoff(kind, min(bounds), max(bounds), jitter),
    st.sampled_from(taskflow.BackoffKind),
    st.tuples(u32s, u32s),
    st.integers(0, 100),
)
"""Any backoff the page allows: its base at most its cap, a jitter of 0 to 100."""
whens = st.tuples(st.none(), st.none()) | st.tuples(u32s, st.none()) | st.tuples(st.none(), u64s)
"""A SUBMIT's delay and time to run at: at most one of the two."""
submits = st.builds(
    _submit,
    types,
    payloads,
    st.none() | queue_names,
    st.none() | st.integers(0, 255),
    st.none() | keys,
    st.none() | keys,
    whens,
    st.none() | u16s,
    st.none() | backoffs,
).map(lambda submit: (encode_submit(submit), submit))
"""A SUBMIT's frame, and its decoding."""
deliveries = st.just((0, 0)) | st.tuples(st.integers(1, 2**64 - 1), u32s)
"""A TASK's token and lease: none (a daemon of part 1), or both."""
retry_counts = st.just((0, 0)) | st.tuples(u16s, st.integers(1, 0xFFFF))
"""A TASK's failures and retries: carried only when it may retry."""
tasks = st.builds(
    _task,
    task_ids,
    types,
    payloads,
    queue_names,
    st.integers(0, 255),
    st.integers(1, 0xFFFF),
    u64s,
    st.none() | keys,
    st.none() | keys,
    deliveries,
    retry_counts,
).map(lambda task: (encode_task(task), task))
"""A TASK's frame, and its decoding."""


@given(submits)
def test_submit_round_trips(message: tuple[bytes, taskflow.Submit]) -> None:
    encoded, expected = message
    decoded = through_parser(encoded)
    assert decoded == expected and isinstance(decoded, taskflow.Submit)
    assert encode_submit(decoded) == encoded  # re-encoding what was decoded changes nothing


@given(submits)
def test_submit_fields_are_a_plain_submits(message: tuple[bytes, taskflow.Submit]) -> None:
    """
    The daemon's SUBMIT decoder gives the type, payload and options of a
    SUBMIT with no other option than a queue and a priority, or those and a
    delay or a deadline to start from now (once its options were decoded),
    and C{None} for any other.
    """
    encoded, expected = message
    payload = encoded[codec.HEADER_SIZE :]
    taskflow.decode_submit(payload)
    task_type, body, options = expected
    timed = taskflow.SubmitOptions(
        options.queue, options.priority, delay_ms=options.delay_ms, expires=options.expires
    )
    relative = options.expires is None or not options.expires.at
    plain = options == timed and relative
    assert plain is (options.routing_only or (options.timed and relative))
    fields = taskflow.submit_fields(payload)
    assert fields == ((task_type, body, options) if plain else None)


def test_submit_options_that_run_past_the_payload_are_refused() -> None:
    """Even when the bytes left are options decoded before."""
    options = taskflow.submit_options("mail", 3)
    payload = taskflow.encode_submit(b"t", b"", options)[codec.HEADER_SIZE :]
    assert taskflow.decode_submit(payload) == taskflow.Submit(
        b"t", b"", taskflow.SubmitOptions("mail", 3)
    )
    cut = payload[:2] + codec.U16.pack(len(options) + 1) + options
    assert taskflow.submit_fields(cut) is None
    with pytest.raises(MalformedMessage, match="run past the payload"):
        taskflow.decode_submit(cut)


@given(task_ids, st.booleans())
def test_ok_round_trips(task_id: int, duplicate: bool) -> None:
    assert through_parser(taskflow.encode_ok(task_id, duplicate)) == taskflow.Ok(task_id, duplicate)


@given(st.integers(1, 0xFFFF), st.lists(queue_names, max_size=32, unique=True))
def test_ready_round_trips(credits: int, queues: list[str]) -> None:
    assert through_parser(taskflow.encode_ready(credits, queues)) == taskflow.Ready(
        credits, tuple(queues)
    )


@given(tasks)
def test_task_round_trips(message: tuple[bytes, taskflow.Task]) -> None:
    encoded, expected = message
    decoded = through_parser(encoded)
    assert decoded == expected and isinstance(decoded, taskflow.Task)
    assert encode_task(decoded) == encoded  # re-encoding what was decoded changes nothing


def decoded_or_error(decode: Callable[[bytes], object], payload: bytes) -> object:
    try:
        return decode(payload)
    except MalformedMessage as e:
        return str(e)


@given(tasks, st.data())
def test_a_task_read_by_its_layout_is_the_task_read_in_full(
    message: tuple[bytes, taskflow.Task], data: st.DataObject
) -> None:
    """
    L{taskflow.decode_task} reads a common delivery of a queue and type it
    has read before in one unpack: the task L{taskflow.decode_task_fully}
    reads; and of the same bytes cut short or altered, the same task or
    the same refusal.
    """
    encoded, expected = message
    payload = encoded[codec.HEADER_SIZE :]
    for _ in range(2):  # the second time, by the layout learned the first, if common
        assert taskflow.decode_task(payload) == expected == taskflow.decode_task_fully(payload)
    cut = data.draw(st.integers(0, len(payload)))
    at = data.draw(st.integers(0, max(0, len(payload) - 1)))
    altered = payload[:at] + bytes((data.draw(st.integers(0, 255)),)) + payload[at + 1 :]
    for changed in (payload[:cut], altered, payload + b"\x00"):
        assert decoded_or_error(taskflow.decode_task, changed) == decoded_or_error(
            taskflow.decode_task_fully, changed
        )


def test_the_common_delivery_is_read_by_its_layout() -> None:
    context = taskflow.task_context(None, None, 71, 30_000)
    frame = taskflow.encode_task(5, b"resize", b"x", b"\x05media", 3, 2, 9, context)
    expected = taskflow.Task(5, b"resize", b"x", "media", 3, 2, 9, token=71, lease_ms=30_000)
    assert taskflow.decode_task(frame[codec.HEADER_SIZE :]) == expected
    assert b"\x05media\x06resize" in taskflow._LAYOUTS
    assert taskflow.decode_task(frame[codec.HEADER_SIZE :]) == expected


@given(tasks, st.integers(0x10000, 0x7FFFFFFF))
def test_a_delivery_is_the_task_with_its_context(
    message: tuple[bytes, taskflow.Task], attempt: int
) -> None:
    """
    The daemon's encoder, fast for a context of a token and lease alone,
    makes the frame L{taskflow.encode_task} makes of L{taskflow.task_context}; an
    attempt past 65,535 is sent as 65,535 either way.
    """
    _, task = message
    queue = bytes((len(task.queue),)) + task.queue.encode()
    for sent_attempt in (task.attempt, attempt):
        delivered = taskflow.encode_delivery(
            task.task_id,
            task.task_type,
            task.payload,
            queue,
            task.priority,
            sent_attempt,
            task.enqueued_ms,
            task.key,
            task.fairness,
            task.token,
            task.lease_ms,
            task.failures,
            task.retries,
        )
        assert delivered == encode_task(task._replace(attempt=min(sent_attempt, 0xFFFF)))


@given(
    st.text(max_size=40).filter(lambda t: len(t.encode()) <= 255),
    st.text(max_size=40).filter(lambda t: len(t.encode()) <= 255),
    st.lists(st.text("abcdefgh-", min_size=1, max_size=10), max_size=5),
)
def test_hello_round_trips(name: str, version: str, capabilities: list[str]) -> None:
    decoded = through_parser(link.encode_hello(name, version, capabilities))
    assert decoded == link.Hello(name, version, tuple(capabilities))


@given(task_ids)
def test_task_id_messages_round_trip(task_id: int) -> None:
    assert through_parser(admin.encode_cancel(task_id)) == admin.Cancel(task_id)
    assert through_parser(admin.encode_cancelled(task_id)) == admin.Cancelled(task_id)
    assert through_parser(admin.encode_inspect(task_id)) == admin.Inspect(task_id)
    assert through_parser(taskflow.encode_done(task_id)) == taskflow.Done(task_id)
    assert through_parser(taskflow.encode_failed(task_id, "why ✗")) == wire.Failed(task_id, "why ✗")


@given(st.sampled_from([MessageType.PAUSE, MessageType.RESUME, MessageType.PURGE]), queue_names)
def test_queue_actions_round_trip(action: MessageType, queue: str) -> None:
    assert through_parser(admin.encode_queue_action(action, queue)) == admin.QueueAction(
        action, queue
    )


@given(queue_names, st.integers(1, 1000))
def test_peek_round_trips(queue: str, count: int) -> None:
    assert through_parser(admin.encode_peek(queue, count)) == admin.Peek(queue, count)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
results_drawn = st.one_of(
    st.binary(max_size=40).map(taskflow.Result.of),
    json_values.map(taskflow.Result.of),
)
"""A task's result: bytes, text or JSON."""


@given(json_values)
def test_info_round_trips(document: object) -> None:
    assert through_parser(link.encode_info(document)) == link.Info(document)


def test_hello_ignores_fields_of_later_releases() -> None:
    assert registry.decode(MessageType.HELLO, b"\x01\x01a\x09\x01x") == link.Hello("a")


def test_the_empty_messages_and_stats() -> None:
    assert through_parser(admin.encode_queues()) == admin.Queues()
    assert through_parser(taskflow.WAIT_FRAME) == wire.Wait()
    assert through_parser(link.HEARTBEAT_FRAME) == wire.Heartbeat()
    assert through_parser(monitor.STATS_FRAME) == wire.StatsRequest()
    assert through_parser(link.PONG_FRAME) == wire.Pong()
    stats = wire.StatsResponse(1, 2, 3, 4, 5)
    assert through_parser(monitor.encode_stats_response(stats)) == stats


@given(st.sampled_from(codec.ErrorCode), st.text(max_size=100))
def test_error_round_trips(code: codec.ErrorCode, message: str) -> None:
    assert through_parser(link.encode_error(code, message)) == wire.Error(code, message)


@given(st.tuples(*[st.integers(0, 2**32 - 1)] * 3, *[st.integers(0, 2**64 - 1)] * 2))
def test_stats_response_round_trips(numbers: tuple[int, int, int, int, int]) -> None:
    stats = wire.StatsResponse(*numbers)
    assert through_parser(monitor.encode_stats_response(stats)) == stats


any_message = st.one_of(
    submits,
    st.builds(lambda i, d: (taskflow.encode_ok(i, d), taskflow.Ok(i, d)), task_ids, st.booleans()),
    st.builds(
        lambda c, q: (taskflow.encode_ready(c, q), taskflow.Ready(c, tuple(q))),
        st.integers(1, 0xFFFF), st.lists(queue_names, max_size=3, unique=True),
    ),
    tasks,
    st.builds(
        lambda c, m: (link.encode_error(c, m), wire.Error(c, m)),
        st.sampled_from(codec.ErrorCode), st.text(max_size=20),
    ),
    st.builds(lambda i: (taskflow.encode_done(i), taskflow.Done(i)), task_ids),
    st.builds(
        lambda i, r: (taskflow.encode_done(i, r), taskflow.Done(i, r)), task_ids, results_drawn
    ),
    st.builds(
        lambda i, r: (taskflow.encode_failed(i, r), wire.Failed(i, r)),
        task_ids,
        st.text(max_size=20),
    ),
    st.builds(lambda i: (admin.encode_cancel(i), admin.Cancel(i)), task_ids),
    st.builds(lambda i: (admin.encode_cancelled(i), admin.Cancelled(i)), task_ids),
    st.builds(lambda i: (admin.encode_inspect(i), admin.Inspect(i)), task_ids),
    st.builds(
        lambda a, q: (admin.encode_queue_action(a, q), admin.QueueAction(a, q)),
        st.sampled_from([MessageType.PAUSE, MessageType.RESUME, MessageType.PURGE]), queue_names,
    ),
    st.builds(
        lambda q, c: (admin.encode_peek(q, c), admin.Peek(q, c)), queue_names, st.integers(1, 1000)
    ),
    st.builds(
        lambda n, v, c: (link.encode_hello(n, v, c), link.Hello(n, v, tuple(c))),
        st.text("abc", max_size=5), st.text("0123.", max_size=5),
        st.lists(st.sampled_from(["queues", "cancel", "x-later"]), max_size=3),
    ),
    st.builds(lambda d: (link.encode_info(d), link.Info(d)), json_values),
    st.sampled_from(
        [
            (taskflow.WAIT_FRAME, wire.Wait()),
            (link.HEARTBEAT_FRAME, wire.Heartbeat()),
            (link.PONG_FRAME, wire.Pong()),
            (monitor.STATS_FRAME, wire.StatsRequest()),
            (admin.QUEUES_FRAME, admin.Queues()),
            (monitor.encode_stats_response(wire.StatsResponse(1, 2, 3, 4, 5)),
             wire.StatsResponse(1, 2, 3, 4, 5)),
        ]
    ),
)  # fmt: skip
"""Any version-2 message: its frame, and what decoding that frame gives."""


@given(st.lists(any_message, min_size=1, max_size=12), st.lists(st.integers(0, 10_000)))
def test_any_stream_of_messages_decodes_whatever_the_reads(
    messages: list[tuple[bytes, object]], cuts: list[int]
) -> None:
    stream = b"".join(encoded for encoded, _ in messages)
    points = sorted({cut % (len(stream) + 1) for cut in cuts})
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    events = []
    for start, end in zip([0, *points], [*points, len(stream)], strict=True):
        events += parser.feed(stream[start:end])
    assert all(isinstance(e, Frame) for e in events)
    decoded = [registry.decode(e.message_type, e.payload) for e in events]  # type: ignore[union-attr]
    assert decoded == [expected for _, expected in messages]
    assert parser.buffered == 0 and parser.version == 2


# -- the page: its example bytes and its tables -------------------------------------------

PROTOCOL = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
VERSION_2 = PROTOCOL[PROTOCOL.index("\n# Version 2") :]
LIFECYCLE = PROTOCOL[PROTOCOL.index("\n# Version 2: retries, dead letters") :]
"""The page's section on part 2 of version 2 (L{quicx.protocol.admin}, L{.outcomes})."""
RESULTS = PROTOCOL[PROTOCOL.index("\n# Version 2: results, progress") :]
"""The page's section on part 3 of version 2 (L{quicx.protocol.outcomes})."""
MONITOR = PROTOCOL[PROTOCOL.index("\n# Version 2: live events") :]
"""The page's section on part 4 of version 2 (L{quicx.protocol.monitor})."""
TRACING = PROTOCOL[PROTOCOL.index("\n# Version 2: trace context") :]
"""The page's section on the trace option (L{quicx.protocol.taskflow})."""
CHECKPOINTS = PROTOCOL[PROTOCOL.index("\n# Version 2: checkpoints") :]
"""The page's section on checkpoints (L{quicx.protocol.checkpoints})."""
WORKERS = PROTOCOL[PROTOCOL.index("\n# Version 2: workers") :]
"""The page's section on the workers' messages (L{quicx.protocol.workers})."""
DEPENDENCIES = PROTOCOL[PROTOCOL.index("\n# Version 2: dependencies") :]
"""The page's section on dependencies (L{quicx.protocol.parents})."""
START_OPTIONS = PROTOCOL[PROTOCOL.index("\n# Version 2: debounce and expiry") :]
"""The page's section on the debounce and expiry options (L{quicx.protocol.taskflow})."""
BULK = PROTOCOL[PROTOCOL.index("\n# Version 2: bulk actions") :]
"""The page's section on bulk actions (L{quicx.protocol.bulk})."""
ROLES = PROTOCOL[PROTOCOL.index("\n# Version 2: roles") :]
"""The page's section on a shard's roles (L{quicx.protocol.role})."""
REPLICATION = PROTOCOL[PROTOCOL.index("\n# Version 2: replication") :]
"""The page's section on replication."""


def example_bytes(block: str) -> bytes:
    """
    The bytes a hex dump of the page spells: hex pairs and JSON-quoted
    strings, up to the first run of three spaces on each line (the comment).
    """
    data = b""
    for line in block.splitlines():
        spelled = re.split(r"\s{3,}", line.strip())[0]
        for token in re.findall(r'"(?:[^"\\]|\\.)*"|\S+', spelled):
            if token.startswith('"'):
                data += json.loads(token).encode("utf-8")
            else:
                assert re.fullmatch(r"(?:[0-9a-f]{2})+", token), token
                data += bytes.fromhex(token)
    return data


def test_the_pages_submit_example() -> None:
    block = VERSION_2.split("Example: `send_email` into queue `mail` at priority 9:")[1]
    spelled = example_bytes(block.split("```")[1])
    encoded = taskflow.encode_submit(b"send_email", b'{"to":1}', taskflow.submit_options("mail", 9))
    assert spelled == encoded
    assert encoded == (
        b'\x02\x01\x00\x00\x00\x1e\x0asend_email\x00\x09\x01\x04mail\x02\x01\x09{"to":1}'
    )
    assert through_parser(spelled) == taskflow.Submit(
        b"send_email", b'{"to":1}', taskflow.SubmitOptions("mail", 9)
    )


def table(text: str, after: str) -> list[list[str]]:
    """The body rows' cells of the first table after the line C{after}."""
    lines = text[text.index(after) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_pages_message_tables_are_the_codecs() -> None:
    rows = table(VERSION_2, "## Messages") + table(LIFECYCLE, "## Messages")
    rows += table(RESULTS, "## Messages") + table(MONITOR, "## Messages")
    rows += table(WORKERS, "## Messages") + table(CHECKPOINTS, "## Messages")
    rows += table(BULK, "## Messages") + table(REPLICATION, "## Messages")
    rows += table(ROLES, "## Messages")
    assert [(int(code, 16), name) for code, name, *_ in rows] == [
        (t.value, t.name) for t in MessageType
    ]


def test_the_pages_option_tags_are_the_codecs() -> None:
    rows = table(VERSION_2, "### SUBMIT options") + table(LIFECYCLE, "## More SUBMIT options")
    rows += table(RESULTS, "## More SUBMIT options") + table(TRACING, "## More SUBMIT options")
    rows += table(DEPENDENCIES, "## More SUBMIT options")
    rows += table(START_OPTIONS, "## More SUBMIT options")
    names = {"queue": "QUEUE", "priority": "PRIORITY", "idempotency key": "KEY"}
    names |= {"fairness key": "FAIRNESS", "delay": "DELAY", "run at": "RUN_AT"}
    names |= {"retries": "RETRIES", "backoff": "BACKOFF", "result": "RESULT"}
    names |= {"progress": "PROGRESS", "group": "GROUP", "trace": "TRACE", "after": "AFTER"}
    names |= {"on-parent-failure": "ON_PARENT_FAILURE", "after-group": "AFTER_GROUP"}
    names |= {"debounce": "DEBOUNCE", "expiry": "EXPIRES"}
    assert [(int(tag, 16), names[option]) for tag, option, *_ in rows] == [
        (o.value, o.name) for o in taskflow.Option
    ]


def test_the_pages_context_tags_are_the_codecs() -> None:
    rows = table(LIFECYCLE, "## TASK context items") + table(CHECKPOINTS, "## TASK context items")
    assert [(int(tag, 16), item.upper()) for tag, item, *_ in rows] == [
        (c.value, c.name) for c in taskflow.Context
    ]


def test_the_pages_error_codes_are_the_codecs() -> None:
    codes = [int(row[0], 16) for row in table(PROTOCOL, "## Error codes\n")]
    codes += [int(row[0], 16) for row in table(VERSION_2, "## Error codes added in version 2")]
    codes += [int(row[0], 16) for row in table(LIFECYCLE, "### Error code added")]
    codes += [int(row[0], 16) for row in table(DEPENDENCIES, "### Error code added")]
    codes += [int(row[0], 16) for row in table(WORKERS, "### Error code added")]
    codes += [int(row[0], 16) for row in table(BULK, "### Error code added")]
    codes += [int(row[0], 16) for row in table(REPLICATION, "### Error code added")]
    assert codes == [c.value for c in codec.ErrorCode]


def test_a_submit_without_options_is_two_bytes_longer_than_version_1() -> None:
    assert len(taskflow.encode_submit(b"t", b"x")) == len(wire.encode_submit(b"t", b"x")) + 2


def opts(*items: bytes) -> bytes:
    body = b"".join(items)
    return struct.pack(">H", len(body)) + body


@pytest.mark.parametrize(
    ("message_type", "payload", "fragment"),
    [
        (MessageType.SUBMIT, b"\x01t", "no options length"),
        (MessageType.SUBMIT, b"\x01t\x00\x05\x01\x01a", "run past the payload"),
        (MessageType.SUBMIT, b"\x01t" + struct.pack(">H", 4097), "exceed 4096"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x7e\x01x"), "unknown option 0x7e"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x02\x01\x01\x02\x01\x02"), "repeats option"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x02\x02\x01\x02"), "priority must be 1 byte"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x03\x00"), "empty idempotency key"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x04\x00"), "empty fairness key"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x01\x03a b"), "queue name"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x01"), "has no length"),
        (MessageType.OK, b"\x00\x00\x00\x01", "5 bytes"),
        (MessageType.READY, b"\x01", "2-byte credit count"),
        (MessageType.READY, b"\x00\x00", "at least 1"),
        (MessageType.READY, b"\x00\x01\x00", "1 to 32 queues"),
        (MessageType.READY, b"\x00\x01\x01\x05abc", "runs past the payload"),
        (MessageType.READY, b"\x00\x01\x01\x01aX", "after its queue list"),
        (MessageType.READY, b"\x00\x01\x02\x01a\x01a", "a queue twice"),
        (MessageType.TASK, b"\x00" * 14, "at least 15 bytes"),
        (MessageType.HELLO, b"\x01\x01\xff", "not UTF-8"),
        (MessageType.CANCEL, b"\x00\x00\x01", "4-byte task id"),
        (MessageType.INSPECT, b"\x00\x00\x00\x00\x01", "4-byte task id"),
        (MessageType.PAUSE, b"", "no queue name length"),
        (MessageType.PURGE, b"\x01ab", "after its queue name"),
        (MessageType.QUEUES, b"\x00", "must be empty"),
        (MessageType.PEEK, b"\x00", "no count"),
        (MessageType.PEEK, b"\x00\x00\x01a", "1 to 1000"),
        (MessageType.PEEK, b"\x03\xe9\x01a", "1 to 1000"),
        (MessageType.INFO, b"{", "JSON"),
        (0x7F, b"", "unknown message type"),
    ],
)
def test_malformed_payloads_say_why(message_type: int, payload: bytes, fragment: str) -> None:
    with pytest.raises(MalformedMessage, match=fragment):
        registry.decode(message_type, payload)


FIXED = struct.pack(">IHBQ", 1, 1, 0, 0)
"""A TASK's task id, attempt, priority and enqueued time."""
NAME_IS_BAD = "is not 1 to 64 letters, digits or '_.:-'"


@pytest.mark.parametrize(
    ("message_type", "payload", "message"),
    [
        (MessageType.SUBMIT, b"", "SUBMIT has no task type length"),
        (MessageType.SUBMIT, b"\x00", "SUBMIT has an empty task type"),
        (MessageType.SUBMIT, b"\x05ab", "SUBMIT task type of 5 bytes runs past the 3-byte payload"),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(b"\x01\x05ab"),
            "SUBMIT option 0x01 of 5 bytes runs past its field",
        ),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x01\x00"), f"SUBMIT queue name b'' {NAME_IS_BAD}"),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(b"\x01\x41" + b"a" * 65),
            f"SUBMIT queue name {b'a' * 64!r} {NAME_IS_BAD}",
        ),
        (MessageType.READY, b"\x00\x01\x21", "READY lists 1 to 32 queues, not 33"),
        (MessageType.READY, b"\x00\x01\x01\x01 ", f"READY queue name b' ' {NAME_IS_BAD}"),
        (MessageType.TASK, FIXED, "TASK has no queue name length"),
        (MessageType.TASK, FIXED + b"\x05ab", "TASK queue name of 5 bytes runs past the payload"),
        (MessageType.TASK, FIXED + b"\x01q", "TASK has no task type length"),
        (MessageType.TASK, FIXED + b"\x01q\x00", "TASK has an empty task type"),
        (
            MessageType.TASK,
            FIXED + b"\x01q\x05t",
            "TASK task type of 5 bytes runs past the 19-byte payload",
        ),
        (MessageType.TASK, FIXED + b"\x01q\x01t", "TASK has no context length"),
        (MessageType.TASK, FIXED + b"\x01q\x01t\x00", "TASK has no context length"),
        (
            MessageType.TASK,
            FIXED + b"\x01q\x01t\x00\x05\x03\x01",
            "TASK context runs past the payload",
        ),
        (
            MessageType.TASK,
            FIXED + b"\x01q\x01t" + opts(b"\x03\x01a\x03\x01b"),
            "TASK repeats option 0x03",
        ),
        (
            MessageType.TASK,
            FIXED + b"\x01q\x01t\x00\x04\x03\x05ab" + b"payload",
            "TASK option 0x03 of 5 bytes runs past its field",
        ),
        (MessageType.HELLO, b"\x01", "HELLO option at byte 0 has no length"),
        (MessageType.HELLO, b"\x01\x05ab", "HELLO option 0x01 of 5 bytes runs past its field"),
        (MessageType.HELLO, b"\x01\x01a\x01\x01b", "HELLO repeats option 0x01"),
        (MessageType.HELLO, b"\x03\x02\xc3(", "HELLO field 0x03 is not UTF-8"),
        (
            MessageType.CANCELLED,
            b"",
            "CANCELLED payload must be a 4-byte task id, got 0 bytes",
        ),
        (MessageType.PEEK, b"\x00\x01", "PEEK has no queue name length"),
        (MessageType.PEEK, b"\x00\x01\x01aX", "PEEK has 1 bytes after its queue name"),
        (MessageType.RESUME, b"\x01 ", f"RESUME queue name b' ' {NAME_IS_BAD}"),
        (MessageType.PAUSE, b"\x03ab", "PAUSE queue name of 3 bytes runs past the payload"),
        (MessageType.OK, b"\x00" * 6, "OK payload must be 5 bytes, got 6"),
        # The layouts version 2 keeps from version 1, through the version-2 decoder.
        (MessageType.ERROR, b"", "ERROR has no error code"),
        (MessageType.DONE, b"\x00", "DONE needs a 4-byte task id, got 1 bytes"),
        (MessageType.FAILED, b"\x00", "FAILED needs a 4-byte task id, got 1 bytes"),
        (MessageType.HEARTBEAT, b"x", "HEARTBEAT payload must be 0 bytes, got 1"),
        (MessageType.STATS, b"x", "STATS payload must be 0 bytes, got 1"),
        (MessageType.WAIT, b"x", "WAIT payload must be 0 bytes, got 1"),
        (MessageType.PONG, b"x", "PONG payload must be 0 bytes, got 1"),
        (MessageType.STATS_RESPONSE, bytes(27), "STATS_RESPONSE payload must be 28 bytes, got 27"),
    ],
)
def test_every_malformed_layout_names_the_message_and_the_fault(
    message_type: MessageType, payload: bytes, message: str
) -> None:
    with pytest.raises(MalformedMessage) as raised:
        registry.decode(message_type, payload)
    assert (str(raised.value), raised.value.message_type) == (message, message_type)


def test_info_that_is_not_utf_8() -> None:
    with pytest.raises(
        MalformedMessage, match=r"^INFO is not a UTF-8 JSON document: 'utf-8' codec"
    ):
        registry.decode(MessageType.INFO, b"\xff")


def test_fields_and_context_of_later_releases_are_passed_over_even_repeated() -> None:
    # HELLO: "Unknown fields are ignored"; TASK: "A worker ignores tags it does not know."
    later = b"\x7e\x01x\x7e\x02yz"
    assert registry.decode(MessageType.HELLO, b"\x01\x01a" + later) == link.Hello("a")
    task = registry.decode(
        MessageType.TASK, FIXED + b"\x01q\x01t" + opts(later + b"\x04\x01f") + b"p"
    )
    assert task == taskflow.Task(1, b"t", b"p", "q", 0, 1, 0, None, b"f")
    # A SUBMIT never ignores an option: "an option is never silently ignored".
    with pytest.raises(MalformedMessage, match=r"^SUBMIT repeats option 0x7e$"):
        registry.decode(MessageType.SUBMIT, b"\x01t" + opts(later))
    with pytest.raises(MalformedMessage, match=r"^SUBMIT has unknown option 0x7e$"):
        registry.decode(MessageType.SUBMIT, b"\x01t" + opts(later[:3]))


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: taskflow.submit_options(queue="a b"), "queue name"),
        (lambda: taskflow.submit_options(priority=256), "0 to 255"),
        (lambda: taskflow.submit_options(key=b""), "1 to 255"),
        (lambda: taskflow.submit_options(fairness=b"x" * 256), "1 to 255"),
        (lambda: taskflow.encode_ready(0), "credits"),
        (lambda: taskflow.encode_ready(1, ["q"] * 33), "at most 32"),
        (lambda: admin.encode_peek("q", 0), "1 to 1000"),
        (lambda: admin.encode_queue_action(MessageType.QUEUES, "q"), "not a queue action"),
        (lambda: taskflow.encode_submit(b"", b""), "task type"),
        (lambda: taskflow.encode_submit(b"t", b"", b"\x09\x00" * 2049), "at most 4096 bytes"),
        (lambda: link.encode_hello(capabilities=["a,b"]), "no comma"),
    ],
)
def test_encoders_refuse_what_the_page_forbids(call, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        call()


# -- versions on one connection ----------------------------------------------------------


def test_the_first_frame_sets_the_version_and_the_other_is_refused() -> None:
    parser = FrameParser(100, v2_max_length=200)
    events = parser.feed(link.PONG_FRAME + wire.PONG_FRAME + link.PONG_FRAME)
    assert parser.version == 2
    assert [type(e) for e in events] == [Frame, RejectedFrame, Frame]
    assert "version-1 frame on a version-2 connection" in events[1].reason  # type: ignore[union-attr]


def test_a_refused_frames_payload_is_skipped_across_reads() -> None:
    parser = FrameParser(100, v2_max_length=200)
    parser.feed(wire.PONG_FRAME)
    stray = wire.frame(wire.MessageType.STATS, b"x" * 50).replace(b"\x01", b"\x02", 1)
    events = parser.feed(stray[:20]) + parser.feed(stray[20:] + wire.PONG_FRAME)
    assert [type(e) for e in events] == [RejectedFrame, Frame]


def test_version_2_is_refused_when_off() -> None:
    parser = FrameParser(100)
    events = parser.feed(link.PONG_FRAME + wire.PONG_FRAME)
    assert isinstance(events[0], RejectedFrame)
    assert events[0].reason == "unsupported protocol version 2"
    assert events[1] == Frame(wire.MessageType.PONG, b"") and parser.version == 1


def test_each_version_has_its_own_length_limit() -> None:
    v1_parser = FrameParser(100, v2_max_length=200)
    (event,) = v1_parser.feed(wire.frame(wire.MessageType.STATS, b"x" * 150))
    assert isinstance(event, RejectedFrame) and "limit of 100" in event.reason
    v2_parser = FrameParser(100, v2_max_length=200)
    (event,) = v2_parser.feed(codec.frame(MessageType.QUEUES, b"x" * 150))
    assert isinstance(event, Frame)
    (event,) = v2_parser.feed(codec.frame(MessageType.QUEUES, b"x" * 201))
    assert isinstance(event, RejectedFrame) and "limit of 200" in event.reason


def test_version_2_types_are_unknown_to_a_version_1_connection() -> None:
    parser = FrameParser(100, v2_max_length=200)
    parser.feed(wire.PONG_FRAME)
    (event,) = parser.feed(wire.frame(MessageType.QUEUES))
    assert isinstance(event, RejectedFrame) and "unknown message type 0x13" in event.reason


def test_repeated_submit_options_decode_alike() -> None:
    """
    Options decoded before (a delay, retries) give the same fields again,
    with each SUBMIT's own type and payload; keys are each SUBMIT's own.
    """
    options = taskflow.submit_options("mail", 3, delay_ms=1, retries=2)
    for task_type, body in ((b"a", b"first"), (b"bb", b"")):
        payload = taskflow.encode_submit(task_type, body, options)[codec.HEADER_SIZE :]
        assert taskflow.decode_submit(payload) == taskflow.Submit(
            task_type, body, taskflow.SubmitOptions("mail", 3, delay_ms=1, retries=2)
        )
    for key in (b"k1", b"k2"):
        keyed = taskflow.submit_options("mail", key=key, delay_ms=1)
        payload = taskflow.encode_submit(b"t", b"", keyed)[codec.HEADER_SIZE :]
        assert taskflow.decode_submit(payload).options.key == key
