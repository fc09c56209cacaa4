"""
Shared data in-process: PUBLISH stores versions within the limits and
journals them, each follower hears each version once (the current one when
it starts following), and a follower whose output is backed up hears only
the newest version of what changed meanwhile.
"""

from __future__ import annotations

import pytest

from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import SharedLimits
from quicx.daemon.queue.shared import SharedData
from quicx.protocol.codec import ErrorCode
from quicx.protocol.session import ProtocolViolation, Role
from quicx.protocol.shared_data import Shared
from tests.fakes import FakeJournal, FakePeer, make_queue, v2_producer_of


def shared_data(**limits: int) -> tuple[QueueService, SharedData, FakeJournal]:
    journal = FakeJournal(waits=False)
    queue = make_queue(journal=journal)
    shared = SharedData(queue, SharedLimits(**limits))
    queue.plug(shared=shared)
    return queue, shared, journal


def follower(queue: QueueService, shared: SharedData, *names: str) -> FakePeer:
    """A version-2 connection that sent FOLLOW C{names}; what it got is taken."""
    peer = FakePeer(queue, "follower", version=2)
    shared.follow(peer.session, names)
    return peer


def refused(code: ErrorCode, call: object, *args: object) -> str:
    with pytest.raises(Refused) as caught:
        call(*args)  # type: ignore[operator]
    assert caught.value.code == code
    return str(caught.value)


def test_each_version_reaches_every_follower_once_and_is_journaled() -> None:
    queue, shared, journal = shared_data()
    producer = v2_producer_of(queue)
    first, second = follower(queue, shared, "model"), follower(queue, shared, "model", "other")
    assert shared.publish(producer.session, "model", b"v1", False) == {
        "name": "model",
        "version": 1,
        "size": 2,
        "followers": 2,
    }
    shared.publish(producer.session, "model", b"v2!", False)
    for peer in (first, second):
        assert peer.take() == [Shared("model", 1, b"v1"), Shared("model", 2, b"v2!")]
    assert journal.shared == [("model", 1, b"v1"), ("model", 2, b"v2!")]
    assert (shared.names, shared.size, shared.published, shared.followers) == (1, 3, 2, 2)
    # Another name reaches only its own follower.
    shared.publish(producer.session, "other", b"o", False)
    assert (first.take(), second.take()) == ([], [Shared("other", 1, b"o")])


def test_follow_sends_the_current_versions_at_once_and_answers_what_it_follows() -> None:
    queue, shared, _ = shared_data()
    producer = v2_producer_of(queue)
    shared.publish(producer.session, "a", b"1", False)
    shared.publish(producer.session, "a", b"2", False)
    late = FakePeer(queue, "late", version=2)
    answer = shared.follow(late.session, ("a", "b"))
    assert answer == {"following": {"a": 2, "b": 0}}
    assert late.take() == [Shared("a", 2, b"2")]
    assert late.session.role is Role.WORKER
    # A second FOLLOW adds names, and a name not yet published comes with its first version.
    assert shared.follow(late.session, ("c",)) == {"following": {"a": 2, "b": 0, "c": 0}}
    shared.publish(producer.session, "b", b"first", False)
    assert late.take() == [Shared("b", 1, b"first")]


def test_a_follower_that_lags_gets_only_the_newest_version_of_each_name_that_changed() -> None:
    queue, shared, _ = shared_data()
    producer = v2_producer_of(queue)
    shared.publish(producer.session, "gone", b"x", False)
    slow = follower(queue, shared, "a", "b", "gone", "still")
    assert slow.take() == [Shared("gone", 1, b"x")]
    slow.session.paused = True  # its socket is full: the server stopped writing to it
    for n in range(1, 6):
        shared.publish(producer.session, "a", b"a%d" % n, False)
    shared.publish(producer.session, "b", b"b1", False)
    shared.publish(producer.session, "gone", b"", True)
    assert slow.take() == []
    slow.session.paused = False
    shared.output_drained(slow.session)
    assert slow.take() == [Shared("a", 5, b"a5"), Shared("b", 1, b"b1"), Shared("gone", 0)]
    # Caught up: nothing more, and new versions flow again one by one.
    shared.output_drained(slow.session)
    shared.publish(producer.session, "a", b"a6", False)
    assert slow.take() == [Shared("a", 6, b"a6")]


def test_size_names_and_memory_limits_hold_at_their_edges() -> None:
    queue, shared, journal = shared_data(max_size=10, max_names=2, max_memory=15)
    producer = v2_producer_of(queue)
    shared.publish(producer.session, "a", b"x" * 10, False)
    assert "11 bytes exceeds [shared] max_size (10)" in refused(
        ErrorCode.PAYLOAD_TOO_LARGE, shared.publish, producer.session, "a", b"x" * 11, False
    )
    shared.publish(producer.session, "b", b"y" * 5, False)
    assert "max_memory (15)" in refused(
        ErrorCode.QUEUE_FULL, shared.publish, producer.session, "b", b"y" * 6, False
    )
    assert "max_names = 2" in refused(
        ErrorCode.QUEUE_FULL, shared.publish, producer.session, "c", b"", False
    )
    # A new version replaces the old one's bytes: 10 + 5 stays within 15.
    assert shared.publish(producer.session, "a", b"z" * 10, False)["version"] == 2
    assert shared.size == 15 and shared.names == 2
    # Nothing refused was kept or journaled.
    assert [version for _, version, _ in journal.shared] == [1, 1, 2]
    shared.publish(producer.session, "b", b"", True)
    assert shared.publish(producer.session, "c", b"c" * 5, False)["version"] == 1


def test_delete_reaches_followers_as_version_0_and_the_name_starts_again_from_1() -> None:
    queue, shared, journal = shared_data()
    producer = v2_producer_of(queue)
    peer = follower(queue, shared, "table")
    assert "no shared data named 'table'" in refused(
        ErrorCode.NOT_FOUND, shared.publish, producer.session, "table", b"", True
    )
    shared.publish(producer.session, "table", b"rows", False)
    assert shared.publish(producer.session, "table", b"", True) == {
        "name": "table",
        "version": 0,
        "size": 0,
        "followers": 1,
        "deleted": True,
    }
    assert shared.size == 0 and shared.names == 0
    shared.publish(producer.session, "table", b"new", False)
    assert peer.take() == [
        Shared("table", 1, b"rows"),
        Shared("table", 0),
        Shared("table", 1, b"new"),
    ]
    assert journal.shared[-2:] == [("table", 0, b""), ("table", 1, b"new")]


def test_who_may_publish_and_follow() -> None:
    queue, shared, _ = shared_data()
    worker = follower(queue, shared, "a")
    assert "a worker connection may not publish" in refused(
        ErrorCode.FORBIDDEN, shared.publish, worker.session, "a", b"x", False
    )
    worker.session.admin = True  # the control socket: an admin may
    shared.publish(worker.session, "a", b"x", False)
    # A new connection may publish, and is still free to take any role.
    fresh = FakePeer(queue, "fresh", version=2)
    shared.publish(fresh.session, "a", b"y", False)
    assert fresh.session.role is Role.NEW
    producer = v2_producer_of(queue)
    with pytest.raises(ProtocolViolation, match="a producer connection cannot act as a worker"):
        shared.follow(producer.session, ("a",))


def test_a_follower_follows_at_most_max_names() -> None:
    queue, shared, _ = shared_data(max_names=3)
    peer = follower(queue, shared, "a", "b")
    shared.follow(peer.session, ("a", "b", "c"))
    assert "at most 3 shared names" in refused(
        ErrorCode.QUEUE_FULL, shared.follow, peer.session, ("d",)
    )


def test_a_closed_follower_is_forgotten() -> None:
    queue, shared, _ = shared_data()
    producer = v2_producer_of(queue)
    gone, stays = follower(queue, shared, "a"), follower(queue, shared, "a")
    gone.disconnect()
    # A frame to a closed peer fails the test (FakePeer checks).
    assert shared.publish(producer.session, "a", b"x", False)["followers"] == 1
    assert stays.take() == [Shared("a", 1, b"x")]
    assert shared.followers == 1


def test_the_journal_snapshot_holds_the_current_versions_and_a_restore_brings_them_back() -> None:
    queue, shared, _ = shared_data()
    producer = v2_producer_of(queue)
    for data in (b"1", b"22"):
        shared.publish(producer.session, "a", data, False)
    shared.publish(producer.session, "b", b"b", False)
    shared.publish(producer.session, "c", b"c", False)
    shared.publish(producer.session, "c", b"", True)
    assert list(queue.snapshot().shared) == [("a", 2, b"22"), ("b", 1, b"b")]

    again, restored, _ = shared_data()
    restored.restore({"a": (2, b"22"), "b": (1, b"b")})
    assert (restored.names, restored.size) == (2, 3)
    peer = follower(again, restored, "a")
    assert peer.take() == [Shared("a", 2, b"22")]
    assert restored.publish(v2_producer_of(again).session, "a", b"3", False)["version"] == 3


def test_a_broken_journal_refuses_a_publish() -> None:
    queue, shared, journal = shared_data()
    journal.broken = "No space left on device"
    assert "journal unavailable" in refused(
        ErrorCode.QUEUE_FULL, shared.publish, v2_producer_of(queue).session, "a", b"x", False
    )
    assert shared.names == 0 and journal.shared == []


def test_followers_see_a_version_once_the_journal_has_it() -> None:
    queue, shared, journal = shared_data()
    journal.syncing = []  # fsync = always: each record is durable when its Deferred fires
    producer = v2_producer_of(queue)
    peer = follower(queue, shared, "model")
    shared.publish(producer.session, "model", b"v1", False)
    shared.publish(producer.session, "model", b"v2", False)
    assert peer.take() == []  # not yet on disk
    first, second = journal.syncing
    first.callback(None)
    assert peer.take() == [Shared("model", 1, b"v1")]
    second.errback(OSError("disk gone"))  # never durable: never shown
    assert peer.take() == []
