"""
The Twisted producer of several daemons (L{quicx.clients.twisted_cluster}):
on a memory reactor, its connections made, refused and lost by hand and the
daemons' answers written by the test; then against three real daemons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

import quicx
from quicx.clients.cluster import TaskRef, ranking
from quicx.clients.twisted_client import ProducerService, QuicxClientProtocol, connect
from quicx.clients.twisted_cluster import ClusterProducerService, open_producer
from quicx.protocol import admin, link, monitor, registry, taskflow, wire
from quicx.protocol.errors import ConnectionLost, NotAcknowledged, QueueFull
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.wire import ErrorCode
from tests.conftest import DaemonProcess

THREE = [f"tcp:127.0.0.1:{1001 + n}" for n in range(3)]


class Daemons:
    """
    A L{ClusterProducerService} of three daemons on a memory reactor: the
    test answers each connection attempt and each request by hand.
    """

    def __init__(self, **options: Any) -> None:
        self.reactor = MemoryReactorClock()
        self.service = ClusterProducerService(self.reactor, THREE, first=0, **options)
        self.service.startService()
        self._seen = 0
        self.links: dict[int, tuple[Any, StringTransport, FrameParser]] = {}
        self.ids = [0, 0, 0]

    def attempts(self) -> dict[int, Any]:
        """The connection attempts since the last call: factory by daemon index."""
        new = self.reactor.tcpClients[self._seen :]
        self._seen = len(self.reactor.tcpClients)
        return {port - 1001: factory for _, port, factory, _, _ in new}

    def accept(self, daemon: int, factory: Any, greet: bool = True) -> QuicxClientProtocol:
        """The attempt succeeds and the daemon answers HELLO (unless not C{greet})."""
        wrapper = factory.buildProtocol(None)
        transport = StringTransport()
        wrapper.makeConnection(transport)
        parser = FrameParser(1 << 22, check_types=False, v2_max_length=1 << 22)
        self.links[daemon] = (wrapper, transport, parser)
        assert [type(m) for m in self.sent(daemon)] == [link.Hello]
        protocol: QuicxClientProtocol = wrapper._wrappedProtocol._protocol
        if greet:
            protocol.dataReceived(link.encode_info({"server": "quicx"}))
        return protocol

    def accept_all(self) -> None:
        for daemon, factory in self.attempts().items():
            self.accept(daemon, factory)

    def refuse(self, factory: Any) -> None:
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))

    def lose(self, daemon: int) -> None:
        wrapper, _, _ = self.links.pop(daemon)
        wrapper.connectionLost(Failure(ConnectionDone()))

    def sent(self, daemon: int) -> list[Any]:
        _, transport, parser = self.links[daemon]
        data = transport.value()
        transport.clear()
        frames = parser.feed(data)
        return [registry.decode(f.message_type, f.payload) for f in frames if isinstance(f, Frame)]

    def answer(self, daemon: int) -> list[taskflow.Submit]:
        """Accept every SUBMIT the daemon was sent since the last look; return them."""
        submits = self.sent(daemon)
        for submit in submits:
            assert isinstance(submit, taskflow.Submit)
            self.ids[daemon] += 1
            self.links[daemon][0].dataReceived(taskflow.encode_ok(self.ids[daemon]))
        return submits

    def submit(self, task_type: str = "t", **options: Any) -> Deferred[TaskRef]:
        return ensureDeferred(self.service.submit(task_type, b"x", **options))

    def stop(self) -> None:
        stopped = self.service.stopService()
        for daemon in list(self.links):
            self.lose(daemon)
        self.reactor.advance(10)
        assert stopped.called


def value(fired: Deferred[Any]) -> Any:
    """What C{fired} fired with; raised if it failed."""
    assert fired.called
    result = fired.result
    fired.addErrback(lambda _: None)
    if isinstance(result, Failure):
        result.raiseException()
    return result


@pytest.fixture
def daemons() -> Iterator[Daemons]:
    made = Daemons()
    yield made
    made.stop()


def keys_of(daemon: int, count: int) -> list[str]:
    """C{count} keys whose daemon is THREE[daemon]."""
    found = (f"order-{n}" for n in range(1000))
    return [k for k in found if ranking(k, THREE)[0] == THREE[daemon]][:count]


def test_tasks_spread_over_the_daemons_and_keys_go_to_theirs(daemons: Daemons) -> None:
    daemons.accept_all()
    unkeyed = [daemons.submit() for _ in range(6)]
    keyed = [daemons.submit(key=k) for k in keys_of(1, 2)]
    sharded = daemons.submit(shard_key=keys_of(2, 1)[0], key="other")
    sent = {d: daemons.answer(d) for d in range(3)}
    refs = [d.result for d in unkeyed]
    assert [r.daemon for r in refs] == THREE * 2
    assert refs[:3] == [TaskRef(1, a) for a in THREE]
    # No key of the service's own: an unkeyed submit goes out without one.
    assert [s.options.key for s in sent[0]] == [None, None]
    assert [r.result.daemon for r in keyed] == [THREE[1]] * 2
    assert [s.options.key for s in sent[1][2:]] == [k.encode() for k in keys_of(1, 2)]
    assert sharded.result.daemon == THREE[2]
    assert sent[2][-1].options.key == b"other"


def test_a_refusal_is_raised_and_goes_to_no_other_daemon(daemons: Daemons) -> None:
    daemons.accept_all()
    refused = daemons.submit(key=keys_of(0, 1)[0])
    daemons.sent(0)
    daemons.links[0][0].dataReceived(link.encode_error(ErrorCode.QUEUE_FULL, "full"))
    with pytest.raises(QueueFull):
        value(refused)
    assert all(daemons.sent(d) == [] for d in (1, 2))
    assert [m.failures for m in daemons.service.members] == [0, 0, 0]


def test_a_daemon_that_goes_away_keeps_keyed_submits_and_reports_the_others(
    daemons: Daemons,
) -> None:
    daemons.accept_all()
    names = keys_of(0, 3)
    unkeyed = [daemons.submit() for _ in range(6)]
    keyed = [daemons.submit(key=k) for k in names]
    assert [m.awaiting for m in daemons.service.members] == [5, 2, 2]
    daemons.answer(1), daemons.answer(2)
    daemons.lose(0)  # five SUBMITs sent to it, none answered
    for d in unkeyed[0::3]:
        with pytest.raises(NotAcknowledged) as raised:
            value(d)
        assert raised.value.daemon == THREE[0]
    # The keyed ones went on to their keys' next daemons, with their keys.
    resent = {d: daemons.answer(d) for d in (1, 2)}
    assert sorted(s.options.key for s in resent[1] + resent[2]) == sorted(k.encode() for k in names)
    assert [d.result.daemon for d in keyed] == [ranking(k, THREE)[1] for k in names]
    assert all(d.result.daemon != THREE[0] for d in unkeyed[1::3] + unkeyed[2::3])

    # Down now: nothing goes to it, and nobody waits for its reconnection.
    later = [daemons.submit() for _ in range(4)] + [daemons.submit(key=names[0])]
    daemons.answer(1), daemons.answer(2)
    assert all(d.called for d in later)
    assert {d.result.daemon for d in later} == {THREE[1], THREE[2]}
    # Its service reconnects by itself, and it takes tasks again.
    daemons.reactor.advance(5)
    (back, factory), *_ = daemons.attempts().items()
    assert back == 0
    daemons.accept(0, factory)
    daemons.reactor.advance(5)
    again = daemons.submit(key=names[0])
    daemons.answer(0)
    assert again.result == TaskRef(1, THREE[0])


def test_a_daemon_is_waited_for_until_its_first_connection_is_made_or_fails(
    daemons: Daemons,
) -> None:
    first = daemons.submit(key=keys_of(0, 1)[0])
    assert not first.called  # nothing is connected yet
    attempts = daemons.attempts()
    daemons.refuse(attempts[0])  # the key's daemon is down: its next one takes it
    daemons.accept(1, attempts[1])
    daemons.accept(2, attempts[2])
    daemons.answer(1), daemons.answer(2)
    assert first.result.daemon == ranking(keys_of(0, 1)[0], THREE)[1]
    # Known down now: skipped at once, whatever its retry time says.
    daemons.reactor.advance(0.5)
    daemons.attempts()
    spread = [daemons.submit() for _ in range(4)]
    daemons.answer(1), daemons.answer(2)
    assert Counter(d.result.daemon for d in spread) == {THREE[1]: 2, THREE[2]: 2}


def test_a_submit_not_answered_in_the_timeout_is_lost_and_a_late_answer_is_dropped() -> None:
    daemons = Daemons(timeout=5)
    try:
        daemons.accept_all()
        [name] = keys_of(0, 1)
        keyed = daemons.submit(key=name)
        unkeyed = daemons.submit()
        assert [s.options.key for s in daemons.sent(0)] == [name.encode(), None]  # both on daemon 0
        daemons.reactor.advance(4.9)
        assert not (keyed.called or unkeyed.called)
        daemons.reactor.advance(0.2)  # daemon 0 never answered them
        with pytest.raises(NotAcknowledged) as raised:
            value(unkeyed)
        assert raised.value.daemon == THREE[0]
        # The keyed one went on to its key's next daemon, with its key.
        nxt = THREE.index(ranking(name, THREE)[1])
        assert [s.options.key for s in daemons.answer(nxt)] == [name.encode()]
        assert value(keyed) == TaskRef(1, THREE[nxt])
        # Down, once for each submit lost, and awaiting none.
        member = daemons.service.members[0]
        assert (member.failures, member.awaiting) == (2, 0)

        # Down until its retry time: skipped, though still connected.
        later = [daemons.submit() for _ in range(2)]
        daemons.answer(1), daemons.answer(2)
        assert daemons.sent(0) == []
        assert {value(d).daemon for d in later} == {THREE[1], THREE[2]}

        # Its late answers are dropped; the connection stays in step.
        link = daemons.links[0][0]
        link.dataReceived(taskflow.encode_ok(41) + taskflow.encode_ok(42))
        assert not daemons.links[0][1].disconnecting
        daemons.reactor.advance(1)  # its retry time is over
        again = daemons.submit(key=name)
        daemons.answer(0)
        assert value(again) == TaskRef(1, THREE[0])
        assert daemons.service.members[0].failures == 0
    finally:
        daemons.stop()


def test_a_daemon_that_never_answers_hello_is_skipped_after_the_timeout() -> None:
    daemons = Daemons(timeout=5)
    try:
        attempts = daemons.attempts()
        daemons.accept(0, attempts[0], greet=False)
        daemons.accept(1, attempts[1])
        daemons.accept(2, attempts[2])
        [name] = keys_of(0, 1)
        keyed = daemons.submit(key=name)
        daemons.reactor.advance(5.1)
        nxt = THREE.index(ranking(name, THREE)[1])
        daemons.answer(nxt)
        assert value(keyed).daemon == THREE[nxt]  # nothing was sent to daemon 0
        assert daemons.sent(0) == []
        assert daemons.service.members[0].failures == 1
    finally:
        daemons.stop()


def test_stats_and_each_answer_by_daemon_with_errors_in_place() -> None:
    daemons = Daemons(timeout=5)
    try:
        daemons.accept_all()
        daemons.lose(0)
        stats = ensureDeferred(daemons.service.stats())
        assert [type(m) for m in daemons.sent(1) + daemons.sent(2)] == [wire.StatsRequest] * 2
        numbers = wire.StatsResponse(1, 2, 3, 4, 5)
        daemons.links[1][0].dataReceived(monitor.encode_stats_response(numbers))
        assert not stats.called
        daemons.reactor.advance(5.1)  # daemon 2 never answers
        answers = value(stats)
        assert list(answers) == THREE
        assert isinstance(answers[THREE[0]], ConnectionLost)
        assert answers[THREE[1]] == numbers
        assert isinstance(answers[THREE[2]], TimeoutError)
        # The late answer is dropped.
        daemons.links[2][0].dataReceived(monitor.encode_stats_response(numbers))
        tasks = ensureDeferred(daemons.service.each(lambda client: client.task(7)))
        daemons.links[1][0].dataReceived(link.encode_info({"id": 7}))
        daemons.links[2][0].dataReceived(link.encode_info({"id": 7}))
        assert list(value(tasks).values())[1:] == [{"id": 7}, {"id": 7}]
    finally:
        daemons.stop()


def test_with_every_daemon_down_a_submit_fails_at_once(daemons: Daemons) -> None:
    for factory in daemons.attempts().values():
        daemons.refuse(factory)
    with pytest.raises(ConnectionLost, match="none of the 3 daemons can be reached"):
        value(daemons.submit())
    assert [m.failures for m in daemons.service.members] == [2, 2, 2]


def test_calls_by_ref_go_to_the_refs_daemon(daemons: Daemons) -> None:
    daemons.accept_all()
    ref = TaskRef(7, THREE[2])
    task = ensureDeferred(daemons.service.task(str(ref)))
    assert daemons.sent(0) == daemons.sent(1) == []
    [asked] = daemons.sent(2)
    assert isinstance(asked, admin.Inspect) and asked.task_id == 7
    cancel = ensureDeferred(daemons.service.cancel(ref))
    [cancelled] = daemons.sent(2)
    assert isinstance(cancelled, admin.Cancel) and cancelled.task_id == 7
    assert not (task.called or cancel.called)
    daemons.links[2][0].dataReceived(link.encode_info({"id": 7, "state": "queued"}))
    assert value(task) == {"id": 7, "state": "queued"}
    cancel.addErrback(lambda _: None)  # never answered
    with pytest.raises(ValueError, match="not one of this cluster's daemons"):
        value(ensureDeferred(daemons.service.result("1@tcp:10.9.9.9:16381")))
    with pytest.raises(ValueError, match="ID@ADDRESS"):
        value(ensureDeferred(daemons.service.outcome("7")))


def test_submit_and_wait_waits_on_the_connection_that_submitted(daemons: Daemons) -> None:
    daemons.accept_all()
    waited = ensureDeferred(daemons.service.submit_and_wait("t", b"x", shard_key="user-7"))
    daemon = THREE.index(ranking("user-7", THREE)[0])
    daemons.answer(daemon)
    assert not waited.called
    daemons.links[daemon][0].dataReceived(taskflow.encode_done(1))
    assert waited.result == TaskRef(1, THREE[daemon])


def test_one_daemon_or_several() -> None:
    with pytest.raises(ValueError, match="names 2 daemons, and ProducerService talks to one"):
        ProducerService(reactor, "h:1,h:2")
    with pytest.raises(ValueError, match="ClusterProducerService or open_producer"):
        value(ensureDeferred(connect(reactor, "h:1, h:2")))
    assert type(open_producer(reactor, "h:1")) is ProducerService
    cluster = quicx.open_producer(reactor, ["h:1", "h:2"], spread="least-loaded")
    assert isinstance(cluster, quicx.ClusterProducerService)
    assert cluster.addresses == ("tcp:h:1", "tcp:h:2")
    assert [s.name for s in cluster] == list(cluster.addresses)
    with pytest.raises(ValueError, match="named twice"):
        open_producer(reactor, "h:1,tcp:h:1")


# -- three real daemons ------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_three_daemons_spread_keys_stay_and_a_killed_one_fails_keyed_submits_over(
    start_daemon,
) -> None:
    daemons: list[DaemonProcess] = [start_daemon() for _ in range(3)]
    addresses = [d.client_address for d in daemons]
    producer = ClusterProducerService(reactor, ",".join(addresses), first=0)
    producer.startService()
    try:
        spread = [await producer.submit("t", b"x") for _ in range(30)]
        assert Counter(r.daemon for r in spread) == dict.fromkeys(addresses, 10)
        names = [f"order-{n}" for n in range(30)]
        keyed = [await producer.submit("t", b"k", key=name) for name in names]
        assert [r.daemon for r in keyed] == [ranking(n, addresses)[0] for n in names]
        assert await producer.submit("t", b"k", key=names[3]) == keyed[3]  # its daemon's answer
        assert (await producer.task(keyed[3]))["state"] == "queued"

        # Killed with the connection open: the submits made in this turn of
        # the reactor are sent to it too, and it answers none.
        gone = addresses[0]
        daemons[0].kill()
        theirs = [n for n in names if ranking(n, addresses)[0] == gone]
        submits = [ensureDeferred(producer.submit("t", b"k", key=n)) for n in theirs]
        submits += [ensureDeferred(producer.submit("t", b"u")) for _ in range(3)]
        outcomes = [await d.addErrback(lambda f: f.value) for d in submits]
        refs, unkeyed = outcomes[: len(theirs)], outcomes[len(theirs) :]
        assert [r.daemon for r in refs] == [ranking(n, addresses)[1] for n in theirs]
        reported = [e for e in unkeyed if isinstance(e, NotAcknowledged)]
        assert [e.daemon for e in reported] == [gone]
        # Down now: every submit goes to the others at once.
        later = [await producer.submit("t", b"v") for _ in range(4)]
        assert {r.daemon for r in later} == set(addresses[1:])
        with pytest.raises(ConnectionLost, match="cannot be reached"):
            await producer.result(keyed[names.index(theirs[0])])
    finally:
        await producer.stopService()
