"""
What the client API says when it is used wrongly, against a real daemon:
each mistake is one clear error that names what to do instead, raised
before anything is sent where the client can tell.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from quicx.clients.blocking import QuicxClient
from quicx.clients.outcomes import NOT_ARRIVED, OutcomeBook
from quicx.clients.twisted_client import connect
from quicx.protocol.errors import NotSubmittedHere, PayloadTooLarge
from tests.conftest import DaemonProcess


def test_waiting_for_a_task_not_submitted_here_says_so(daemon: DaemonProcess) -> None:
    with QuicxClient(daemon.client_address) as client:
        with pytest.raises(NotSubmittedHere) as raised:
            client.wait(999999, timeout=1)
        assert str(raised.value) == (
            "task 999999 was not submitted by this client, or its outcome was already taken;"
            " result(999999) reads an outcome the daemon kept (keep_result=True)"
        )
        assert isinstance(raised.value, KeyError)  # as it was: `except KeyError` still works
        assert raised.value.task_id == 999999
    # The Twisted client's outcome() takes from the same book.
    with pytest.raises(NotSubmittedHere, match="task 7 was not submitted"):
        OutcomeBook().take(7)


def test_an_outcome_is_taken_once_and_only_once_it_came() -> None:
    """L{OutcomeBook.taken}, the blocking wait's short way: as take, without raising."""
    book = OutcomeBook()
    book.expect(7)
    assert book.taken(7) is NOT_ARRIVED and book.taken(8) is NOT_ARRIVED
    book.arrived(7, None)
    assert book.taken(7) is None
    assert book.taken(7) is NOT_ARRIVED
    with pytest.raises(NotSubmittedHere):
        book.take(7)


@pytest.mark.parametrize("protocol", [1, 2])
@pytest.mark.parametrize("payload", [{"a": 1}, 12, None])
def test_a_payload_that_is_not_bytes_or_text_is_refused_before_it_is_sent(
    daemon: DaemonProcess, protocol: int, payload: object
) -> None:
    with QuicxClient(daemon.client_address, protocol=protocol) as client:
        message = (
            f"a task's payload is bytes or str, not {type(payload).__name__}: encode it first,"
            " for example json.dumps(payload), and decode it in the handler"
        )
        with pytest.raises(TypeError) as raised:
            client.submit("t", payload)  # type: ignore[arg-type]
        assert str(raised.value) == message
        with pytest.raises(TypeError, match="encode it first"):
            client.submit_many([("t", b"ok"), ("t", payload)])  # type: ignore[list-item]
        # Nothing of either call reached the daemon; the connection is fine.
        assert client.stats().queue_depth == 0
        # The annotation says str | bytes; a buffer is taken as bytes.
        assert client.submit("t", bytearray(b"a buffer")) == 1  # type: ignore[arg-type]
        assert client.submit("t", "text") == 2


@pytest_twisted.ensureDeferred
async def test_the_twisted_client_refuses_such_a_payload_and_waits_alike(
    daemon: DaemonProcess,
) -> None:
    client = await connect(reactor, daemon.client_address)
    try:
        with pytest.raises(TypeError, match="not dict: encode it first"):
            await client.submit("t", {"a": 1})  # type: ignore[arg-type]
        assert await client.submit("t", b"ok") == 1
        with pytest.raises(NotSubmittedHere, match="task 999999 was not submitted"):
            client.outcome(999999)
    finally:
        client.transport.loseConnection()


def test_a_list_of_daemons_points_to_the_clients_that_take_one() -> None:
    with pytest.raises(ValueError) as raised:
        QuicxClient("tcp:a:1,tcp:b:2")
    assert str(raised.value) == (
        "'tcp:a:1,tcp:b:2' names 2 daemons, and QuicxClient talks to one: use open_client or"
        " ClusterClient (quicx.clients.blocking_cluster) for several"
    )


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_payload_too_large_names_its_size_class_limit(
    daemon: DaemonProcess, protocol: int
) -> None:
    with QuicxClient(daemon.client_address, protocol=protocol) as client:
        with pytest.raises(PayloadTooLarge) as near:
            client.submit("t", b"x" * 1025)
        assert "1025 bytes exceeds the largest size class (1024 bytes)" in str(near.value)
        with pytest.raises(PayloadTooLarge) as far:
            client.submit("t", b"x" * 2_000_000)
        # Refused from the frame's header: the frame's size (payload, type and
        # options), and the payload's limit, never the frame's.
        assert str(far.value) == (
            f"a SUBMIT of {2_000_002 if protocol == 1 else 2_000_004:,} bytes: its payload"
            " exceeds the largest size class (1024 bytes); a larger [allocator] class takes it"
        )
        assert client.submit("t", b"x" * 1024) == 1
