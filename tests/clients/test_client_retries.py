"""
Producers hear RETRYING before a task's final outcome: against a raw daemon
in a thread that sends the notices where they are most awkward -- before the
answer to a later SUBMIT, and for a task nobody submitted here.  Neither
client takes a notice for an answer, and each outcome comes once.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import reactor

from quicx.clients.blocking import QuicxClient
from quicx.clients.outcomes import RetryNotice
from quicx.clients.twisted_client import connect
from quicx.protocol import link, outcomes, taskflow
from quicx.protocol.errors import TaskFailed
from tests.peer import Peer

DUE_MS = 1_800_000_000_000


def retrying(task_id: int, attempt: int) -> bytes:
    return outcomes.encode_retrying(task_id, attempt, DUE_MS + attempt, f"boom {attempt}")


def notice(task_id: int, attempt: int) -> RetryNotice:
    return RetryNotice(task_id, attempt, (DUE_MS + attempt) / 1000, f"boom {attempt}")


class RetryingDaemon:
    """
    Answers HELLO and two SUBMITs, with RETRYING notices in between; the
    second SUBMIT's OK comes after a notice for task 1 and one for task 99.
    Then, when told (L{finish}), task 1 is retried once more and DONE, and
    task 2 FAILED.

    @ivar submits: the SUBMITs it received, decoded.
    """

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp:127.0.0.1:{self.listener.getsockname()[1]}"
        self.submits: list[taskflow.Submit] = []
        self.go = threading.Event()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with Peer(self.listener.accept()[0]) as peer:
            assert isinstance(peer.receive(), link.Hello)
            peer.send(link.encode_info({"server": "raw"}))
            self.submits.append(peer.receive())
            peer.send(taskflow.encode_ok(1) + retrying(1, 1))
            self.submits.append(peer.receive())
            peer.send(retrying(1, 2) + retrying(99, 1) + taskflow.encode_ok(2))
            self.go.wait(10)
            peer.send(retrying(1, 3) + taskflow.encode_done(1) + taskflow.encode_failed(2, "no"))
            self.closing.wait(10)

    def finish(self) -> None:
        self.go.set()

    def close(self) -> None:
        self.go.set()
        self.closing.set()
        self.thread.join(10)
        self.listener.close()


@pytest.fixture
def raw() -> Iterator[RetryingDaemon]:
    daemon = RetryingDaemon()
    yield daemon
    daemon.close()


def test_blocking_client_hands_retry_notices_to_wait(raw: RetryingDaemon) -> None:
    heard: list[RetryNotice] = []
    with QuicxClient(raw.address, timeout=10) as client:
        first = client.submit("t", b"a", retries=3, backoff="fixed:2s")
        second = client.submit("t", b"b", delay=0.5)
        assert (first, second) == (1, 2)
        raw.finish()
        client.wait(first, on_retry=heard.append)
        assert heard == [notice(1, 1), notice(1, 2), notice(1, 3)]
        with pytest.raises(TaskFailed):
            client.wait(second, on_retry=heard.append)
        assert len(heard) == 3
    assert (raw.submits[0].options.retries, raw.submits[0].options.backoff) == (
        3,
        taskflow.Backoff(taskflow.BackoffKind.FIXED, 2000, 2000, 0),
    )
    assert raw.submits[1].options.delay_ms == 500


@pytest_twisted.ensureDeferred
async def test_twisted_outcome_fires_once_with_the_final_outcome(raw: RetryingDaemon) -> None:
    heard: list[RetryNotice] = []
    client = await connect(reactor, raw.address)
    try:
        first = await client.submit("t", b"a", retries=3, backoff="fixed:2s")
        second = await client.submit("t", b"b", delay=0.5)
        assert (first, second) == (1, 2)
        outcome = client.outcome(first, heard.append)  # the two kept notices, at once
        assert heard == [notice(1, 1), notice(1, 2)]
        assert not outcome.called
        raw.finish()
        await outcome  # DONE
        assert heard == [notice(1, 1), notice(1, 2), notice(1, 3)]
        with pytest.raises(TaskFailed):
            await client.outcome(second, heard.append)
        assert len(heard) == 3
    finally:
        client.close()
    assert raw.submits[1].options.delay_ms == 500


@pytest_twisted.ensureDeferred
async def test_a_listener_that_raises_is_logged_not_fatal(raw: RetryingDaemon) -> None:
    def broken(notice: RetryNotice) -> None:
        raise RuntimeError("listener bug")

    client = await connect(reactor, raw.address)
    try:
        first = await client.submit("t", b"a")
        await client.submit("t", b"b")
        outcome = client.outcome(first, broken)
        raw.finish()
        await outcome  # DONE
    finally:
        client.close()
