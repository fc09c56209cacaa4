"""
The sans-I/O client connection (L{quicx.clients.connection}): bytes in,
events out, against the real codec, without sockets or a reactor.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.clients import operations, requests
from quicx.clients.connection import (
    Answer,
    ClientConnection,
    Event,
    Greeted,
    Progressed,
    Rejected,
    Request,
    Retried,
    Send,
    Settled,
    Unanswered,
)
from quicx.clients.requests import Options
from quicx.protocol import admin, codec, link, monitor, outcomes, taskflow, wire
from quicx.protocol.errors import (
    NeedsVersion2,
    OutcomeUnknown,
    QueueFull,
    QuicxError,
    TaskFailed,
    error_from,
)
from quicx.protocol.frames import Frame, FrameParser

HELLO_ANSWER = link.encode_info({"server": "quicx", "capabilities": ["results"]})


def greeted(protocol: int = 2) -> ClientConnection:
    connection = ClientConnection(protocol)
    connection.connect()
    if protocol == 2:
        (event,) = connection.receive(HELLO_ANSWER)
        assert event == Greeted(2, {"server": "quicx", "capabilities": ["results"]})
    return connection


def answers(events: list[Event]) -> list[Any]:
    return [event.value for event in events if isinstance(event, Answer)]


def test_it_opens_with_hello_and_holds_requests_until_the_answer() -> None:
    connection = ClientConnection()
    assert connection.connect() == requests.HELLO
    submit = Request.submit([("t", b"p")])
    assert connection.send(submit) == b""  # held: the version is not known yet
    events = connection.receive(HELLO_ANSWER)
    assert events[0] == Send(taskflow.encode_submit(b"t", b"p"))
    assert isinstance(events[1], Greeted) and connection.server["server"] == "quicx"
    assert answers(connection.receive(taskflow.encode_ok(7))) == [7]
    assert connection.book.pending(7)


def test_a_version_1_error_to_hello_falls_back_and_encodes_the_held_in_version_1() -> None:
    connection = ClientConnection()
    connection.connect()
    plain = Request.submit([("t", b"p")])
    keyed = Request.submit([("t", b"p", Options(key="k"))])
    queues = operations.queues()
    for request in (plain, keyed, queues):
        connection.send(request)
    events = connection.receive(wire.encode_error(wire.ErrorCode.INVALID_MESSAGE, "bad version"))
    assert [type(e.value) for e in events if isinstance(e, Answer)] == [NeedsVersion2] * 2
    assert Send(wire.encode_submit(b"t", b"p")) in events
    assert events[-1] == Greeted(1, {}, fell_back=True)
    assert connection.version == 1
    assert answers(connection.receive(wire.encode_ok(3))) == [3]


def test_protocol_1_sends_no_hello() -> None:
    connection = ClientConnection(protocol=1)
    assert connection.connect() == b""
    assert connection.send(Request.stats()) == wire.STATS_FRAME
    with pytest.raises(NeedsVersion2):
        connection.send(Request.info("queues", lambda: admin.QUEUES_FRAME))


def test_an_unexpected_answer_to_hello_is_an_error() -> None:
    connection = ClientConnection()
    connection.connect()
    (event,) = connection.receive(taskflow.encode_ok(1))
    assert isinstance(event, Greeted) and isinstance(event.error, QuicxError)


def test_answers_go_to_the_requests_in_order_errors_mapped() -> None:
    connection = greeted()
    batch = Request.submit([("t", b"1"), ("t", b"2"), ("t", b"3")])
    info = operations.queues()
    stats = Request.stats()
    sent = b"".join(connection.send(r) for r in (batch, info, stats))
    assert sent == b"".join(
        [taskflow.encode_submit(b"t", p) for p in (b"1", b"2", b"3")]
        + [admin.QUEUES_FRAME, monitor.STATS_FRAME]
    )
    counts = wire.StatsResponse(1, 2, 3, 4, 5)
    events = connection.receive(
        taskflow.encode_ok(1)
        + link.encode_error(wire.ErrorCode.QUEUE_FULL, "full")
        + taskflow.encode_ok(3)
        + link.encode_info([{"name": "default"}])
        + monitor.encode_stats_response(counts)
    )
    requests_answered = [e.request for e in events if isinstance(e, Answer)]
    assert requests_answered == [batch, batch, batch, info, stats]
    values = answers(events)
    assert values[0] == 1 and values[2] == 3
    assert isinstance(values[1], QueueFull) and str(values[1]) == "full"
    assert values[3] == [{"name": "default"}]
    assert values[4] == counts
    assert not connection.owed


def test_an_answer_of_the_wrong_type_is_an_error_for_its_request() -> None:
    connection = greeted()
    connection.send(Request.info("queues", lambda: admin.QUEUES_FRAME))
    (value,) = answers(connection.receive(taskflow.encode_ok(1)))
    assert isinstance(value, QuicxError) and "unexpected Ok for queues" in str(value)


def test_outcomes_retries_and_progress_are_filed() -> None:
    connection = greeted()
    seen: list[object] = []
    connection.send(Request.submit([("t", b"1")], seen.append))
    connection.send(Request.submit([("t", b"2")]))
    events = connection.receive(
        outcomes.encode_progress(1, 9, 2500, "early")
        + taskflow.encode_ok(1)
        + taskflow.encode_ok(2)
    )
    assert [type(e) for e in events] == [Progressed, Answer, Answer]  # the early report first
    events = connection.receive(
        outcomes.encode_progress(1, 9, 5000, "half")
        + outcomes.encode_retrying(2, 1, 5000, "boom")
        + taskflow.encode_done(1, taskflow.Result.of({"ok": True}))
        + taskflow.encode_failed(2, "for good")
    )
    assert [type(e) for e in events] == [Progressed, Retried, Settled, Settled]
    progressed = events[0]
    assert isinstance(progressed, Progressed) and progressed.report.fraction == 0.5
    assert [n.reason for n in connection.book.notices(2)] == ["boom"]
    done = connection.book.take(1)
    assert isinstance(done, taskflow.Result) and done.value() == {"ok": True}
    failed = connection.book.take(2)
    assert isinstance(failed, TaskFailed) and failed.reason == "for good"


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_heartbeat_is_answered_in_the_connections_version(protocol: int) -> None:
    connection = greeted(protocol)
    spoken = link if protocol == 2 else wire
    assert connection.receive(spoken.HEARTBEAT_FRAME) == [Send(spoken.PONG_FRAME)]
    assert connection.receive(spoken.PONG_FRAME) == []  # one nobody asked for


def test_a_reply_nobody_is_owed_is_unanswered() -> None:
    connection = greeted()
    error = link.encode_error(wire.ErrorCode.QUEUE_FULL, "no")
    (event,) = connection.receive(error)
    assert isinstance(event, Unanswered) and isinstance(event.message, wire.Error)


def fenced_wait(connection: ClientConnection) -> tuple[Request[Any], list[object]]:
    got: list[object] = []
    request = operations.result(connection, 5, 1.5, deadline=10.0, then=got.append, fenced=True)
    assert connection.send(request) == outcomes.encode_await(5, 1500) + link.HEARTBEAT_FRAME
    return request, got


def test_a_fenced_wait_taken_then_answered() -> None:
    connection = greeted()
    request, got = fenced_wait(connection)
    assert connection.receive(link.PONG_FRAME) == [Answer(request, None)]
    outcome = outcomes.Outcome(5, outcomes.OutcomeState.DONE)
    assert connection.receive(outcomes.encode_outcome(5, outcomes.OutcomeState.DONE)) == []
    assert got == [outcome]


def test_a_fenced_wait_refused() -> None:
    connection = greeted()
    _, got = fenced_wait(connection)
    events = connection.receive(link.encode_error(wire.ErrorCode.QUEUE_FULL, "too many"))
    (value,) = answers(events)
    assert isinstance(value, QueueFull)
    assert connection.receive(link.PONG_FRAME) == []
    assert not connection.owed
    assert connection.awaits.clear() == []  # the refused wait is forgotten
    assert got == []


def test_an_unfenced_waits_refusal_is_unanswered() -> None:
    connection = greeted()
    request = operations.result(connection, 5, 0, deadline=1.0)
    assert connection.send(request) == outcomes.encode_await(5, 0)
    assert not connection.owed
    (event,) = connection.receive(link.encode_error(wire.ErrorCode.QUEUE_FULL, "no"))
    assert isinstance(event, Unanswered)
    connection.refused(request)
    assert connection.awaits.clear() == []


def test_connection_lost_ends_requests_and_makes_outcomes_unknown() -> None:
    connection = greeted()
    connection.send(Request.submit([("t", b"1")]))
    connection.receive(taskflow.encode_ok(1))
    connection.send(Request.info("queues", lambda: admin.QUEUES_FRAME))
    assert connection.connection_lost() == [1]
    assert not connection.owed
    assert isinstance(connection.book.take(1), OutcomeUnknown)
    assert connection.connect() == requests.HELLO  # and the next one starts afresh
    assert connection.owed and not connection.greeted


@pytest.mark.parametrize("protocol", [1, 2])
def test_oks_and_dones_read_from_the_bytes_are_checked_as_decoded_ones(protocol: int) -> None:
    # OK and DONE skip the message objects (a producer's every task): what
    # they file must be what the decoders' path files, and a malformed one
    # is still refused.
    spoken = wire if protocol == 1 else taskflow
    connection = greeted(protocol)
    connection.send(Request.submit([("t", b"1"), ("t", b"2")]))
    events = connection.receive(spoken.encode_ok(7) + spoken.encode_ok(8) + spoken.encode_done(7))
    assert answers(events) == [7, 8] and not connection.owed
    assert connection.book.take(7) is None and connection.book.pending(8)
    # An OK nobody is owed is unanswered, as decoded.
    (event,) = connection.receive(spoken.encode_ok(9))
    assert isinstance(event, Unanswered) and isinstance(event.message, wire.Ok | taskflow.Ok)
    assert event.message.task_id == 9
    # An OK or DONE a byte too long or short is malformed.
    for bad in (b"\x02\x00\x00\x00\x06" + bytes(6), b"\x06\x00\x00\x00\x03" + bytes(3)):
        connection = greeted(protocol)
        connection.send(Request.submit([("t", b"1")]))
        (event,) = connection.receive(bytes((protocol,)) + bad)
        assert isinstance(event, Rejected) and "malformed" in event.reason


def test_a_bad_frame_is_rejected() -> None:
    connection = greeted()
    (event,) = connection.receive(b"\x07\x01\x00\x00\x00\x00")
    assert isinstance(event, Rejected) and "bad frame" in event.reason


# -- round trips against the codec ----------------------------------------------------------

names = st.binary(min_size=1, max_size=20)
payloads = st.binary(max_size=200)
options = st.builds(
    Options,
    queue=st.none() | st.sampled_from(["default", "mail", "images"]),
    priority=st.none() | st.integers(0, 255),
    key=st.none() | st.binary(min_size=1, max_size=32),
    retries=st.none() | st.integers(0, 100),
    keep_result=st.booleans(),
    group=st.none() | st.integers(1, 1000),
)
tasks = st.lists(
    st.tuples(names, payloads) | st.tuples(names, payloads, options), min_size=1, max_size=20
)


@given(
    st.lists(
        st.tuples(
            names | st.text(min_size=1, max_size=20),
            payloads | st.text(max_size=50) | payloads.map(bytearray),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from([1, 2]),
)
def test_plain_submits_are_the_encoders_frames(
    batch: list[tuple[str | bytes, Any]], version: int
) -> None:
    """A batch's types and payloads, as text or bytes, make the frames encode_submit makes."""
    encode = wire.encode_submit if version == 1 else taskflow.encode_submit
    expected = b"".join(
        encode(
            task_type.encode() if isinstance(task_type, str) else task_type,
            payload.encode() if isinstance(payload, str) else bytes(payload),
        )
        for task_type, payload in batch
    )
    assert requests.submit_frames(version, batch) == expected


def test_a_plain_submit_with_a_bad_type_or_payload_is_refused_as_before() -> None:
    with pytest.raises(ValueError, match="a task type is 1 to 255 bytes, not 256"):
        requests.submit_frames(1, [("t", b"x"), ("x" * 256, b"x")])
    with pytest.raises(TypeError):
        requests.submit_frames(2, [("t", {"not": "bytes"})])  # type: ignore[list-item]


@given(tasks)
def test_submits_are_the_codecs_and_decode_back(batch: list[requests.Task]) -> None:
    connection = greeted()
    data = connection.send(Request.submit(batch))
    assert data == requests.submit_frames(2, batch)
    frames = FrameParser(1 << 20, v2_max_length=1 << 20).feed(data)
    assert len(frames) == len(batch)
    for frame, task in zip(frames, batch, strict=True):
        assert isinstance(frame, Frame)
        task_type, payload, submit = taskflow.decode_submit(frame.payload)
        assert (task_type, payload) == (task[0], task[1])
        expected = task[2] if len(task) == 3 else Options()
        assert (submit.queue, submit.priority, submit.key, submit.retries, submit.group) == (
            expected.queue,
            expected.priority,
            expected.key,
            expected.retries,
            expected.group,
        )
        assert submit.result_ttl == (0 if expected.keep_result else None)


replies = st.lists(
    st.one_of(
        st.integers(1, codec.MAX_TASK_ID).map(lambda i: ("ok", i)),
        st.sampled_from(list(wire.ErrorCode)).map(lambda c: ("error", c)),
    ),
    min_size=1,
    max_size=30,
)


@given(replies, st.data())
def test_replies_split_anywhere_answer_the_same(
    sent: list[tuple[str, Any]], data: st.DataObject
) -> None:
    connection = greeted()
    request = Request.submit([("t", b"p")] * len(sent))
    connection.send(request)
    stream = b"".join(
        taskflow.encode_ok(value) if kind == "ok" else link.encode_error(value, f"e{value}")
        for kind, value in sent
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    events: list[Event] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        events += connection.receive(stream[start:end])
    got = answers(events)
    for (kind, value), answer in zip(sent, got, strict=True):
        if kind == "ok":
            assert answer == value and connection.book.pending(value)
        else:
            expected = error_from(wire.Error(value, f"e{value}"))
            assert type(answer) is type(expected) and str(answer) == str(expected)
    assert len(got) == len(sent) and not connection.owed


def test_only_the_outcomes_watched_are_events_and_every_one_is_filed() -> None:
    """The asyncio client watches the outcomes awaited: the others are filed in the book alone."""
    connection = greeted()
    connection.send(Request.submit([("t", b"x")] * 3))
    connection.receive(b"".join(taskflow.encode_ok(task_id) for task_id in (1, 2, 3)))
    awaited: dict[int, object] = {2: None}
    connection.watched = awaited
    done = b"".join(taskflow.encode_done(task_id) for task_id in (1, 2))
    assert connection.receive(done) == [Settled(2)]
    awaited[3] = None
    failed = taskflow.encode_failed(3, "no")
    assert connection.receive(failed) == [Settled(3)]
    assert [connection.book.take(task_id) for task_id in (1, 2)] == [None, None]
    assert str(connection.book.take(3)) == "task 3 failed: no"
