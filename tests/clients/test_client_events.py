"""
Live events in the clients: the blocking client's C{events()} iterator and
the Twisted client's C{watch()}, against a real daemon; and the feed that
bounds what a blocking client keeps of events it has not handed out.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from quicx.clients import watching
from quicx.clients.blocking import QuicxClient
from quicx.clients.twisted_client import connect
from quicx.clients.watching import EventFeed
from quicx.clients.worker import Worker
from quicx.protocol.errors import NeedsVersion2, QueueFull
from quicx.protocol.monitor import Events
from tests.cli.test_cli_events import run, wait_for_watchers
from tests.clients.test_twisted_clients import address, eventually
from tests.conftest import DaemonProcess


def kinds_and_tasks(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(e["event"], e["task"]) for e in events]


def test_the_iterator_yields_the_events_that_pass_its_filter(daemon: DaemonProcess) -> None:
    with QuicxClient(daemon.client_address, timeout=10) as client:
        events = client.events(queues=["mail"], types=[b"send"], kinds=["submitted", "done"])
        run(daemon, "mail", "other")
        sent = run(daemon, "mail", "send")
        run(daemon, "sms", "send")
        got = [next(events), next(events)]
        assert kinds_and_tasks(got) == [("submitted", sent), ("done", sent)]
        events.close()
        with pytest.raises(StopIteration):
            next(events)
        with client.events(kinds=["dead"], timeout=0.3) as quiet:
            with pytest.raises(TimeoutError):
                next(quiet)  # nothing came: the watch goes on
            run(daemon, "mail")
            with pytest.raises(TimeoutError):
                next(quiet)


def test_leaving_the_loop_stops_the_watch_and_the_client_goes_on(daemon: DaemonProcess) -> None:
    with QuicxClient(daemon.client_address, timeout=10) as client:
        events = client.events(queues=["q"])  # watching from here
        task_id = run(daemon, "q")
        for event in events:
            assert (event["event"], event["task"]) == ("submitted", task_id)
            break
        del events  # dropped: the watch ends
        wait_for_watchers(daemon, 0)
        run(daemon, "q")  # its events are not sent: the calls below see none
        assert client.stats().queue_depth == 0
        assert client.queues()
        queued = client.submit("t", b"x", queue="q2")
        assert client.task(queued)["state"] == "queued"


def test_more_watchers_than_the_daemon_takes_is_queue_full(start_daemon) -> None:
    daemon = start_daemon("--events-max-subscribers=1")
    with QuicxClient(daemon.client_address) as first, QuicxClient(daemon.client_address) as other:
        watched = first.events()
        with pytest.raises(QueueFull, match="max_subscribers = 1"):
            other.events()
        assert other.stats().workers_total == 0  # the client is fine
        watched.close()
        wait_for_watchers(daemon, 0)
        other.events().close()


def test_bad_filters_are_refused_before_they_are_sent(daemon: DaemonProcess) -> None:
    with QuicxClient(daemon.client_address) as client:
        with pytest.raises(ValueError, match="no event kind 'finished'"):
            client.events(kinds=["finished"])
        with pytest.raises(ValueError, match="queue name"):
            client.events(queues=["no spaces"])
    with QuicxClient(daemon.client_address, protocol=1) as v1, pytest.raises(NeedsVersion2):
        v1.events()


@pytest_twisted.ensureDeferred
async def test_the_twisted_client_calls_its_listener_with_each_event(
    daemon: DaemonProcess,
) -> None:
    worker = Worker()
    worker.register("t", lambda payload: None)
    worker.start(reactor, address(daemon))
    client = await connect(reactor, address(daemon))
    seen: list[dict[str, Any]] = []
    try:
        taken = await client.watch(seen.append, kinds=["done"])
        assert taken == {"queues": [], "types": [], "kinds": ["done"]}
        ids = await defer.gatherResults([client.submit("t", b"%d" % i) for i in range(5)])
        await defer.gatherResults([client.outcome(i) for i in ids])

        async def all_seen() -> bool:
            return len(seen) == 5

        await eventually(all_seen)
        assert sorted(e["task"] for e in seen) == ids and {e["event"] for e in seen} == {"done"}
        await client.unwatch()
        await client.submit_and_wait("t", b"after")
        assert len(seen) == 5
        with pytest.raises(ValueError):
            await client.watch(seen.append, kinds=["finished"])
    finally:
        client.close()
        await worker.stop()


# -- the feed --------------------------------------------------------------------


def line(task_id: int) -> str:
    return f'{{"event":"done","task":{task_id}}}'


def test_items_put_what_was_missed_before_the_events() -> None:
    assert watching.items(Events((line(1),), missed=3)) == [
        {"event": "missed", "count": 3},
        {"event": "done", "task": 1},
    ]
    assert watching.items(Events((line(2),))) == [{"event": "done", "task": 2}]


def test_items_parse_each_line_as_one_event_or_refuse_the_batch() -> None:
    # A batch is parsed as one array; lines that do not make one event
    # each are refused, as parsing them one by one would.
    assert watching.items(Events((line(1), line(2), line(3)))) == [
        {"event": "done", "task": n} for n in (1, 2, 3)
    ]
    for bad in (("1,2", line(1)), ("[1", "2]"), (line(1), "{")):
        with pytest.raises(ValueError):
            watching.items(Events(bad))


def test_the_feed_keeps_the_newest_and_says_how_many_it_dropped() -> None:
    feed = EventFeed(keep=3)
    feed.arrived(Events((line(1),)))
    assert feed.next() is None  # not watching: the tail of an old watch
    feed.watching = True
    feed.arrived(Events((line(1), line(2)), missed=5))
    feed.arrived(Events((line(3), line(4))))
    # Kept: 2, 3, 4; dropped: the daemon's count (5) and event 1.
    assert feed.next() == {"event": "missed", "count": 6}
    assert [feed.next() for _ in range(4)] == [
        {"event": "done", "task": 2},
        {"event": "done", "task": 3},
        {"event": "done", "task": 4},
        None,
    ]
    feed.arrived(Events((line(5),)))
    feed.stop()
    assert feed.next() is None and not feed.watching
