"""
One worker, several daemons (a cluster): the rule that shares the worker's
capacity among them (L{quicx.clients.shares}), on made-up numbers; the
worker's connections on a memory reactor, connected and lost by hand, and
the READYs they send; then C{quicx worker --connect LIST} against real
daemons on loopback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import ensureDeferred
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from quicx import __version__
from quicx.cli import main
from quicx.clients.adaptive import AUTO_MAX
from quicx.clients.blocking import QuicxClient
from quicx.clients.shares import slot_credits, split
from quicx.clients.slot import HELLO_TIMEOUT, WorkerProtocol
from quicx.clients.worker import RETRY_FIRST, Worker
from quicx.protocol import link, registry, taskflow, wire
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.wire import ErrorCode
from tests.clients.test_worker_leases import FakeDaemon
from tests.conftest import DaemonProcess
from tools.launcher import start_workers, stop_all

# -- the rule ----------------------------------------------------------------------------


def test_split_is_as_even_as_whole_numbers_go_the_first_parts_one_more() -> None:
    assert split(8, 3) == (3, 3, 2)
    assert split(9, 3) == (3, 3, 3)
    assert split(2, 4) == (1, 1, 0, 0)
    assert split(0, 2) == (0, 0)


def test_capacity_is_split_among_the_daemons_counted_then_among_their_slots() -> None:
    # concurrency 2, credits 4: 8 tasks, however many daemons.
    assert slot_credits(8, 2, [True]) == ((4, 4),)
    assert slot_credits(8, 2, [True, True, True]) == ((2, 1), (2, 1), (1, 1))
    # A daemon gone: its share goes to the others, and comes back with it.
    assert slot_credits(8, 2, [True, False, True]) == ((2, 2), (), (2, 2))
    assert slot_credits(8, 2, [False, False, True]) == ((), (), (4, 4))
    assert slot_credits(8, 2, [False, False, False]) == ((), (), ())


def test_every_slot_of_a_daemon_counted_holds_a_credit_at_least() -> None:
    # 2 tasks for 3 daemons of one slot each: no READY asks for 0.
    assert slot_credits(2, 1, [True, True, True]) == ((1,), (1,), (1,))
    assert slot_credits(3, 2, [True, True]) == ((1, 1), (1, 1))


@pytest.mark.parametrize("concurrency", [1, 2, 3, 7])
@pytest.mark.parametrize("credits", [1, 2, 5, 64, AUTO_MAX])
def test_one_daemon_gets_what_a_worker_always_had(concurrency: int, credits: int) -> None:
    assert slot_credits(concurrency * credits, concurrency, [True]) == ((credits,) * concurrency,)


@pytest.mark.parametrize("live", [[True] * 5, [True, False, True, True, False], [False, True]])
def test_the_slots_of_the_daemons_counted_hold_the_capacity_exactly(live: list[bool]) -> None:
    for capacity in range(2 * sum(live), 100):
        table = slot_credits(capacity, 2, live)
        assert sum(map(sum, table)) == capacity
        shares = [sum(credits) for credits, counted in zip(table, live, strict=True) if counted]
        assert max(shares) - min(shares) <= 1


# -- on a memory reactor -----------------------------------------------------------------


class Cluster:
    """
    A worker started on a memory reactor with C{count} daemons: the test
    answers each connection attempt (L{accept}, L{refuse}) and reads what
    the connections send.
    """

    def __init__(self, worker: Worker, count: int) -> None:
        self.worker = worker
        self.reactor = MemoryReactorClock()
        self.addresses = [f"tcp:127.0.0.1:{1001 + n}" for n in range(count)]
        self._seen = 0
        self.open: dict[WorkerProtocol, StringTransport] = {}
        self.parser: dict[WorkerProtocol, FrameParser] = {}
        worker.start(self.reactor, ",".join(self.addresses))

    def attempts(self) -> list[tuple[int, Any]]:
        """The connection attempts since the last call: (daemon index, factory)."""
        new = self.reactor.tcpClients[self._seen :]
        self._seen = len(self.reactor.tcpClients)
        return [(port - 1001, factory) for _, port, factory, _, _ in new]

    def accept(self, factory: Any) -> WorkerProtocol:
        """The attempt succeeds, and the daemon answers HELLO."""
        slot = self.connect(factory)
        slot.dataReceived(link.encode_info({"server": "quicx"}))
        return slot

    def connect(self, factory: Any) -> WorkerProtocol:
        """The attempt succeeds; HELLO is not answered (yet)."""
        wrapper = factory.buildProtocol(None)
        transport = StringTransport()
        wrapper.makeConnection(transport)
        slot: WorkerProtocol = wrapper._wrappedProtocol
        self.open[slot] = transport
        self.parser[slot] = FrameParser(1 << 22, check_types=False, v2_max_length=1 << 22)
        assert self.sent(slot) == [link.Hello("quicx-python", __version__, ())]
        return slot

    def refuse(self, factory: Any) -> None:
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))

    def lose(self, slot: WorkerProtocol) -> None:
        del self.open[slot]
        slot.connectionLost(Failure(ConnectionDone()))

    def sent(self, slot: WorkerProtocol) -> list[Any]:
        transport = self.open[slot]
        data = transport.value()
        transport.clear()
        frames = self.parser[slot].feed(data)
        return [registry.decode(f.message_type, f.payload) for f in frames if isinstance(f, Frame)]

    def readies(self) -> dict[tuple[int, int], int]:
        """The credits of each READY sent since the last look, by (daemon, slot)."""
        found = {}
        for slot in list(self.open):
            for message in self.sent(slot):
                assert isinstance(message, taskflow.Ready)
                assert slot.place is not None
                member, place = slot.place
                found[self.worker.members.index(member), place] = message.credits
        return found

    def stop(self) -> None:
        stopped = ensureDeferred(self.worker.stop())
        for slot in list(self.open):
            self.lose(slot)
        self.reactor.advance(10)
        assert stopped.called


@pytest.fixture
def cluster() -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(worker: Worker, count: int) -> Cluster:
        made.append(Cluster(worker, count))
        return made[-1]

    yield make
    for each in made:
        each.stop()


def test_each_daemon_gets_its_share_and_a_lost_ones_goes_to_the_others(cluster) -> None:
    c = cluster(Worker(concurrency=2, credits=4), 3)
    slots: dict[Any, Any] = {}
    for daemon, factory in c.attempts():
        slots.setdefault(daemon, []).append(c.accept(factory))
    assert sorted(len(s) for s in slots.values()) == [2, 2, 2]
    assert c.readies() == {(0, 0): 2, (0, 1): 1, (1, 0): 2, (1, 1): 1, (2, 0): 1, (2, 1): 1}
    # Daemon 2 goes away: its share moves once its last connection is gone.
    c.lose(slots[2][0])
    assert c.readies() == {}
    c.lose(slots[2][1])
    assert c.readies() == {(0, 1): 2, (1, 1): 2}
    # It comes back: the others give its share back, its connection asks for its part.
    c.reactor.advance(0.1)
    (daemon, factory), *_ = c.attempts()
    assert daemon == 2
    c.accept(factory)
    assert c.readies() == {(0, 1): 1, (1, 1): 1, (2, 0): 1}


def test_a_daemon_unreachable_from_the_start_leaves_its_share_to_the_others(cluster) -> None:
    c = cluster(Worker(credits=8), 2)
    (_, first), (_, second) = c.attempts()
    c.accept(first)
    assert c.readies() == {(0, 0): 4}
    c.refuse(second)
    assert c.readies() == {(0, 0): 8}
    # Refused again while it is not counted: nothing changes.
    c.reactor.advance(0.1)
    [(_, again)] = c.attempts()
    c.refuse(again)
    assert c.readies() == {}


def test_a_daemon_that_takes_connections_and_never_answers_leaves_its_share(cluster) -> None:
    c = cluster(Worker(credits=8), 2)
    (_, first), (_, second) = c.attempts()
    c.accept(first)
    silent = c.connect(second)  # a hung host: the connection opens, HELLO goes unanswered
    assert c.readies() == {(0, 0): 4}
    c.reactor.advance(HELLO_TIMEOUT - 0.1)
    assert not c.open[silent].disconnecting
    c.reactor.advance(0.1)
    assert c.open[silent].disconnecting  # given up on ...
    c.lose(silent)
    assert c.readies() == {(0, 0): 8}  # ... and its share is the other's
    # Tried again: only an answer counts it.
    c.reactor.advance(RETRY_FIRST)
    [(daemon, again)] = c.attempts()
    assert daemon == 1
    answering = c.connect(again)
    assert c.readies() == {}
    answering.dataReceived(link.encode_info({"server": "quicx"}))
    assert c.readies() == {(0, 0): 4, (1, 0): 4}


def test_one_daemon_connections_ask_for_the_worker_credits_whatever_comes_and_goes(
    cluster,
) -> None:
    c = cluster(Worker(concurrency=2, credits=3), 1)
    first, second = (c.accept(factory) for _, factory in c.attempts())
    assert c.readies() == {(0, 0): 3, (0, 1): 3}
    assert first.log.namespace == WorkerProtocol.log.namespace  # no address: one daemon
    c.lose(first)
    c.lose(second)
    c.reactor.advance(0.1)
    for _, factory in c.attempts():
        c.accept(factory)
    assert c.readies() == {(0, 0): 3, (0, 1): 3}


def test_chosen_credits_are_capped_by_the_share(cluster) -> None:
    c = cluster(Worker(), 2)
    first, second = (c.accept(factory) for _, factory in c.attempts())
    assert c.readies() == {(0, 0): 1, (1, 0): 1}  # AutoCredits start at 1 ...
    assert first.auto is not None and first.auto.maximum == AUTO_MAX // 2  # ... up to half
    assert first.log.namespace.endswith("@tcp:127.0.0.1:1001")
    c.lose(second)
    assert first.auto.maximum == AUTO_MAX
    assert c.readies() == {}  # growing is the connection's own choice, on its reads


def test_a_share_below_the_chosen_credits_cuts_them_at_once() -> None:
    worker = Worker()
    worker.register("t", lambda payload: None, thread=False)
    worker.timer = lambda: 0.0
    daemon = FakeDaemon(worker)
    daemon.task(1, token=71)
    context = taskflow.task_context(None, None, 73, 10_000)
    daemon.feed(
        b"".join(
            taskflow.encode_task(i, b"t", b"x", b"\x07default", 0, 1, 0, context) for i in (2, 3)
        )
    )
    readies = [m for m in daemon.sent() if isinstance(m, taskflow.Ready)]
    assert readies == [taskflow.Ready(2, ()), taskflow.Ready(4, ())]
    daemon.slot.allot(3)
    assert daemon.sent() == [taskflow.Ready(3, ())]
    daemon.slot.allot(5)  # more room: it grows by its pace, not at once
    assert daemon.sent() == []
    assert daemon.slot.auto is not None and daemon.slot.auto.maximum == 5


def test_a_connection_whose_daemon_refused_credits_keeps_one() -> None:
    worker = Worker(protocol=1, credits=4)
    daemon = FakeDaemon(worker)
    daemon.feed(wire.encode_error(ErrorCode.INVALID_MESSAGE, "READY takes no payload"))
    daemon.sent()
    daemon.slot.allot(2)
    assert daemon.sent() == []


def test_a_list_naming_a_daemon_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="named twice"):
        Worker().start(MemoryReactorClock(), ["tcp:127.0.0.1:1", "127.0.0.1:1"])


# -- with real daemons -------------------------------------------------------------------

HANDLERS = """
import time

def job(payload: bytes) -> None:
    time.sleep(0.02)
    with open({log!r}, "ab") as log:
        log.write(payload + b"\\n")

handlers = {{"job": job}}
"""


@pytest.fixture
def cluster_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Callable[[], list[bytes]]]]:
    """
    Starts one C{quicx worker} process for a list of daemons, its handler
    taking 20 ms a task; gives what its handler ran so far (each task's
    payload, in the order they finished).
    """
    log = tmp_path / "ran.log"
    log.touch()
    (tmp_path / "cluster_handlers.py").write_text(HANDLERS.format(log=str(log)))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    processes: list[subprocess.Popen[bytes]] = []

    def start(daemons: list[DaemonProcess], *args: str) -> Callable[[], list[bytes]]:
        connect = ",".join(d.client_address for d in daemons)
        processes.extend(
            start_workers("cluster_handlers:handlers", 1, ["--connect", connect, *args], tmp_path)
        )
        return lambda: log.read_bytes().splitlines()

    yield start
    stop_all(processes, 5)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., list[DaemonProcess]]]:
    """Starts daemons, one a list of C{twistd quicx} arguments, all at once; kills them after."""
    started: list[DaemonProcess] = []

    def start(*arguments: list[str]) -> list[DaemonProcess]:
        made = [
            DaemonProcess(tmp_path / f"daemon{len(started) + n}", args)
            for n, args in enumerate(arguments)
        ]
        started.extend(made)
        for daemon in made:
            daemon.directory.mkdir()
        with ThreadPoolExecutor(len(made)) as pool:
            return list(pool.map(DaemonProcess.start, made))

    yield start
    for daemon in started:
        daemon.kill()


def submit(daemon: DaemonProcess, name: str, count: int) -> list[bytes]:
    """C{count} jobs on C{daemon}, their payloads C{NAME-0}, C{NAME-1}...: all acknowledged."""
    payloads = [f"{name}-{n}".encode() for n in range(count)]
    with QuicxClient(daemon.client_address) as client:
        for payload in payloads:
            client.submit("job", payload)
    return payloads


def running(daemon: DaemonProcess) -> int:
    """The tasks the daemon has sent to workers and not yet heard of."""
    with QuicxClient(daemon.client_address) as client:
        return sum(queue["running"] for queue in client.queues())


def until(
    done: Callable[[], bool], timeout: float = 10.0, watch: Callable[[], None] = lambda: None
) -> None:
    """Wait for C{done}, calling C{watch} meanwhile; AssertionError after C{timeout}."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        watch()
        time.sleep(0.005)


def test_one_worker_drains_three_daemons_holding_its_credits_among_them(
    daemons, cluster_worker
) -> None:
    three = daemons([], [], [])
    ran = cluster_worker(three, "-n", "1", "--credits", "4")
    submitted = [submit(daemon, f"d{n}", 20) for n, daemon in enumerate(three)]
    peaks = [0, 0, 0]

    def watch() -> None:
        for n, daemon in enumerate(three):
            peaks[n] = max(peaks[n], running(daemon))

    until(lambda: len(ran()) >= 60, watch=watch)
    assert sorted(ran()) == sorted(p for payloads in submitted for p in payloads)
    # Its 4 credits, shared 2, 1, 1 (the remainder to the first): never the
    # 4 on each daemon that a worker per daemon would hold.
    assert peaks == [2, 1, 1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_daemon_killed_and_restarted_gets_its_tasks_run_and_the_others_flow_meanwhile(
    tmp_path: Path, daemons, cluster_worker
) -> None:
    journal = tmp_path / "d0.journal"
    listen = f"--listen=tcp:{free_port()}:interface=127.0.0.1"
    first, *others = daemons([f"--journal={journal}", "--fsync=always", listen], [], [])
    ran = cluster_worker([first, *others], "-n", "1", "--credits", "6")
    queued = submit(first, "d0", 30)
    until(lambda: len(ran()) >= 2)
    first.kill()  # with tasks still queued on it, and some in the worker's hands
    assert set(queued) - set(ran()), "it drained before the kill: make the jobs slower"
    # The others keep flowing, and get its share: 3 credits each, not 2.
    flowing = [submit(daemon, f"d{n}", 30) for n, daemon in enumerate(others, 1)]
    peak = [0]
    until(
        lambda: {p for payloads in flowing for p in payloads} <= set(ran()),
        watch=lambda: peak.__setitem__(0, max(peak[0], running(others[0]))),
    )
    assert peak[0] == 3
    first.start()  # the same port, the same journal
    until(lambda: set(queued) <= set(ran()))


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"QUICX_ADDRESS": "tcp:127.0.0.1:1, nowhere"}, "bad address: 'tcp:nowhere' is not"),
        ({"connect": "tcp:127.0.0.1:1,,tcp:127.0.0.1:2"}, "an empty address in the list"),
        ({"connect": "127.0.0.1:1,tcp:127.0.0.1:1"}, "tcp:127.0.0.1:1 named twice"),
    ],
)
def test_quicx_worker_names_the_bad_item_of_an_address_list(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    given: dict[str, str],
    said: str,
) -> None:
    args = ["worker", "tools.bench:noop_worker"]
    if "connect" in given:
        args += ["--connect", given.pop("connect")]
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    assert main(args) == 1
    said_there = capsys.readouterr().err
    assert said_there.count("\n") == 1 and said_there.startswith("quicx: ")
    assert said in said_there
