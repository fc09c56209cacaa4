"""
Several real daemons on loopback and one L{ClusterClient}: how the tasks
spread, keys that stay on their daemon, and a daemon killed with -9 and
restarted while a producer streams tasks and workers run them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from quicx.cli import main
from quicx.clients.blocking_cluster import ClusterClient, ClusterTask
from quicx.clients.cluster import TaskRef, ranking
from quicx.clients.requests import Options
from quicx.clients.worker import TaskContext, Worker
from quicx.protocol import link
from quicx.protocol.errors import ConnectionLost, NeedsVersion2, NotAcknowledged, QuicxError
from tests.peer import Peer
from tools.launcher import start_workers, stop_all

RUNS_VARIABLE = "QUICX_TEST_RUNS"

recorder = Worker()
"""The workers of these tests: each run of a task, a line in C{$QUICX_TEST_RUNS}."""


@recorder.handler("record", thread=False)
def record(payload: bytes, context: TaskContext) -> None:
    with open(os.environ[RUNS_VARIABLE], "ab") as runs:
        runs.write(b"%d %d %s\n" % (os.getpid(), context.task_id, payload))


def runs_of(path: Path, daemon_of_pid: dict[int, str]) -> dict[bytes, list[TaskRef]]:
    """Each payload's runs, as the tasks that ran: id and daemon."""
    found: dict[bytes, list[TaskRef]] = defaultdict(list)
    if path.exists():
        for line in path.read_bytes().splitlines():
            pid, task_id, payload = line.split(b" ", 2)
            found[payload].append(TaskRef(int(task_id), daemon_of_pid[int(pid)]))
    return found


def keys_of(daemon: str, addresses: list[str], count: int) -> list[str]:
    """C{count} keys, C{k0} on, that go to C{daemon} of C{addresses}."""
    keys = (f"k{n}" for n in itertools.count())
    return list(itertools.islice((k for k in keys if ranking(k, addresses)[0] == daemon), count))


def keyed(name: str) -> tuple[str, bytes, Options]:
    return ("record", name.encode(), Options(key=name))


def test_tasks_spread_over_three_daemons_and_keys_stay_on_theirs(
    start_daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    daemons = [start_daemon() for _ in range(3)]
    addresses = [d.client_address for d in daemons]
    with ClusterClient(addresses, first=0) as cluster:
        spread = Counter(ref.daemon for ref in cluster.submit_many(("t", b"x") for _ in range(300)))
        spread.update(cluster.submit("t", b"one").daemon for _ in range(30))
        print(f"\nround-robin, 330 tasks: {dict(spread)}")
        assert sorted(spread.values()) == [110, 110, 110]

        names = [f"order-{n}" for n in range(300)]
        refs = cluster.submit_many(keyed(name) for name in names)
        by_key = Counter(ref.daemon for ref in refs)
        print(f"by key, 300 keys: {dict(by_key)}")
        assert all(60 <= n <= 140 for n in by_key.values()), by_key
        assert [ref.daemon for ref in refs] == [ranking(name, addresses)[0] for name in names]
        for address, stats in cluster.stats().items():
            assert not isinstance(stats, Exception)
            assert stats.queue_depth == spread[address] + by_key[address]
        one = cluster.submit("record", b"again", key="order-7")
        assert one == refs[7]

    # Another client, given the daemons in another order: the same daemon
    # for each key, and the daemon's own answer to a repeated key.
    with ClusterClient(reversed(addresses), first=0) as other:
        assert other.submit_many(keyed(name) for name in names) == refs
        by_shard = [other.submit("t", b"s", shard_key=name) for name in names[:30]]
        assert [ref.daemon for ref in by_shard] == [ref.daemon for ref in refs[:30]]

    # The command: submit prints ID@ADDRESS, which task and result take back.
    capsys.readouterr()
    cluster_flag = f"--connect={','.join(addresses)}"
    assert main(["submit", "cli", "x", "--key", "order-7", cluster_flag]) == 0
    assert capsys.readouterr().out.strip() == str(refs[7])
    assert main(["submit", "cli", "x", cluster_flag]) == 0
    ref = TaskRef.parse(capsys.readouterr().out.strip())
    assert main(["task", str(ref), "--json"]) == 0  # no --connect: the ref says where
    assert json.loads(capsys.readouterr().out)["type"] == "cli"
    assert main(["result", str(ref), cluster_flag]) == 1
    assert f"task {ref} has not finished yet" in capsys.readouterr().err


def test_a_daemon_that_goes_away_keeps_keyed_submits_and_reports_the_others(
    start_daemon,
) -> None:
    gone, live = start_daemon(), start_daemon()
    addresses = [gone.client_address, live.client_address]
    now = [0.0]
    with ClusterClient(addresses, first=0, timeout=5, clock=lambda: now[0]) as cluster:
        for client in cluster.clients.values():
            client.connect()
        # Stopped after the connection opened: the SUBMITs go, no answer
        # comes, and then it goes away.  (Killed at once, its closed
        # connection would be noticed before anything is sent.)
        os.kill(gone.pid, signal.SIGSTOP)
        threading.Timer(0.5, gone.kill).start()
        names = keys_of(addresses[0], addresses, 5)
        tasks = [("t", b"u%d" % n) for n in range(6)] + [keyed(name) for name in names]
        results = cluster.submit_many(tasks, return_exceptions=True)
        unkeyed, keyed_refs = results[:6], results[6:]
        # Round-robin: every other unkeyed task went to the daemon that went away.
        assert all(isinstance(r, NotAcknowledged) for r in unkeyed[0::2]), unkeyed
        assert {r.daemon for r in unkeyed[0::2]} == {gone.client_address}
        assert all(
            isinstance(r, TaskRef) and r.daemon == live.client_address for r in unkeyed[1::2]
        )
        assert all(isinstance(r, TaskRef) and r.daemon == live.client_address for r in keyed_refs)

        # Down now: nothing more goes to it until its retry time.
        assert {cluster.submit("t", b"x").daemon for _ in range(4)} == {live.client_address}
        assert cluster.submit("record", b"k", key=names[0]) == keyed_refs[0]
        # Its retry time has come: it cannot be reached, so nothing was sent
        # and the task goes to the next daemon, keyed or not.
        now[0] += 10
        assert cluster.submit("t", b"y").daemon == live.client_address
        assert [m.failures for m in cluster.members] == [2, 0]

        # Raised, the error holds every task's result.
        live.kill()
        with pytest.raises(ConnectionLost) as raised:
            cluster.submit_many([("t", b"z")] * 3)
        assert len(raised.value.results) == 3
        assert all(isinstance(r, QuicxError) for r in raised.value.results)


def test_a_daemon_killed_mid_stream_and_restarted_loses_no_acknowledged_task(
    tmp_path: Path, start_daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    journals = [tmp_path / f"journal{n}" for n in range(3)]
    daemons = [start_daemon(f"--journal={j}", "--fsync=always") for j in journals]
    addresses = [d.client_address for d in daemons]
    runs_path = tmp_path / "runs"
    monkeypatch.setenv(RUNS_VARIABLE, str(runs_path))
    workers = []
    for n, address in enumerate(addresses):
        (tmp_path / f"worker{n}").mkdir()
        args = ["--connect", address]
        workers += start_workers(f"{__name__}:recorder", 1, args, tmp_path / f"worker{n}")
    daemon_of_pid = {w.pid: a for w, a in zip(workers, addresses, strict=True)}
    try:
        stream = Stream(ClusterClient(addresses, first=0, timeout=5))
        stream.start()
        stream.wait_for(lambda: len(stream.acknowledged) >= 600)
        victim = daemons[1]
        victim.kill()
        before = len(stream.acknowledged)
        stream.wait_for(lambda: len(stream.acknowledged) >= before + 100)
        restarted = start_daemon(
            f"--journal={journals[1]}",
            "--fsync=always",
            f"--listen=tcp:{victim.port}:interface=127.0.0.1",
        )
        assert restarted.client_address == victim.client_address
        assert "tasks recovered" in restarted.log()
        before = stream.count(victim.client_address)
        stream.wait_for(lambda: stream.count(victim.client_address) >= before + 100)
        stream.stop()

        # Every acknowledged task runs, at least once, on the daemon that acknowledged it.
        deadline = time.monotonic() + 20
        while True:
            runs = runs_of(runs_path, daemon_of_pid)
            missing = [p for p, ref in stream.acknowledged.items() if ref not in runs.get(p, [])]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        spread = Counter(ref.daemon for ref in stream.acknowledged.values())
        print(
            f"\n{len(stream.acknowledged)} acknowledged ({dict(spread)}),"
            f" {len(stream.unacknowledged)} not acknowledged, reported;"
            f" {sum(map(len, runs.values()))} runs"
        )
        assert not missing, f"{len(missing)} acknowledged tasks never ran, e.g. {missing[:3]}"
        assert stream.unacknowledged <= {p for p in stream.sent if p.startswith(b"u")}
        assert not stream.failures, stream.failures[:3]
        # A keyed task may run on two daemons (its own went away, and had
        # taken it), but it is one task on each: never two on one daemon.
        for payload, refs in runs.items():
            if payload.startswith(b"k"):
                per_daemon = Counter(ref.daemon for ref in set(refs))
                assert max(per_daemon.values()) == 1, (payload, refs)
        # A keyed task went to its key's next daemon only while the victim was down.
        moved = 0
        for payload, ref in stream.acknowledged.items():
            choices = ranking(payload, addresses)
            if payload.startswith(b"k") and ref.daemon != choices[0]:
                assert (choices[0], ref.daemon) == (victim.client_address, choices[1])
                moved += 1
        print(f"{moved} keyed tasks went to their key's next daemon")
        assert moved
    finally:
        stop_all(workers)


class Stream(threading.Thread):
    """
    Submits rounds of tasks, half with keys (C{k...}, the payload its key),
    half without (C{u...}), until stopped; keeps what each got.
    """

    def __init__(self, cluster: ClusterClient) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acknowledged: dict[bytes, TaskRef] = {}
        self.unacknowledged: set[bytes] = set()
        self.failures: list[tuple[bytes, QuicxError]] = []
        self.sent: list[bytes] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with self.cluster:
            seq = 0
            while not self.stopping.is_set():
                batch = [
                    keyed(f"k{n}") if n % 2 else ("record", b"u%d" % n)
                    for n in range(seq, seq + 40)
                ]
                seq += len(batch)
                self.sent += [task[1] for task in batch]
                for task, result in zip(
                    batch, self.cluster.submit_many(batch, return_exceptions=True), strict=True
                ):
                    if isinstance(result, TaskRef):
                        self.acknowledged[task[1]] = result
                    elif isinstance(result, NotAcknowledged):
                        self.unacknowledged.add(task[1])
                    else:
                        self.failures.append((task[1], result))
                time.sleep(0.01)

    def count(self, address: str) -> int:
        """The tasks acknowledged by the daemon at C{address} so far."""
        return sum(ref.daemon == address for ref in list(self.acknowledged.values()))

    def wait_for(self, done: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert self.is_alive(), "the stream stopped"
            assert time.monotonic() < deadline, "the stream did not get there in time"
            time.sleep(0.005)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def test_a_daemon_that_never_answers_hello_is_down_and_nothing_waits_on_it(start_daemon) -> None:
    """A listening socket nobody accepts on: connections open, HELLO is never answered."""
    live = start_daemon()
    with socket.create_server(("127.0.0.1", 0)) as hung:
        addresses = [f"tcp:127.0.0.1:{hung.getsockname()[1]}", live.client_address]
        with ClusterClient(addresses, first=0, timeout=0.3, clock=lambda: 0.0) as cluster:
            refs = cluster.submit_many([("t", b"m")] * 4 + [keyed("k")])  # nothing was sent
            assert {ref.daemon for ref in refs} == {live.client_address}
            assert cluster.submit("t", b"one").daemon == live.client_address
            assert [m.failures for m in cluster.members] == [1, 0]


def test_a_daemon_that_never_answers_a_submit_is_like_one_that_went_away(start_daemon) -> None:
    live = start_daemon()
    listener = socket.create_server(("127.0.0.1", 0))
    submits: list[object] = []

    def deaf_daemon() -> None:
        with Peer(listener.accept()[0]) as peer:
            assert isinstance(peer.receive(), link.Hello)
            peer.send(link.encode_info({"server": "deaf"}))
            with contextlib.suppress(ConnectionError):  # until the client closes
                while True:
                    submits.append(peer.receive(timeout=5))

    thread = threading.Thread(target=deaf_daemon, daemon=True)
    thread.start()
    deaf = f"tcp:127.0.0.1:{listener.getsockname()[1]}"
    addresses = [deaf, live.client_address]
    names = keys_of(deaf, addresses, 2)
    with ClusterClient(addresses, first=0, timeout=0.3, clock=lambda: 0.0) as cluster:
        results = cluster.submit_many(
            [("t", b"u0"), ("t", b"u1"), keyed(names[0]), keyed(names[1])], return_exceptions=True
        )
        assert isinstance(results[0], NotAcknowledged) and results[0].daemon == deaf
        assert isinstance(results[1], TaskRef) and results[1].daemon == live.client_address
        assert [r.daemon for r in results[2:]] == [live.client_address] * 2  # type: ignore[union-attr]
        assert cluster.submit("t", b"next").daemon == live.client_address  # it is down now
    thread.join(10)
    listener.close()
    assert len(submits) == 3  # each sent once


def test_a_version_1_daemon_is_sent_no_task_with_options_and_the_others_answer(
    start_daemon,
) -> None:
    old, new = start_daemon("--protocol-versions=1"), start_daemon()
    addresses = [old.client_address, new.client_address]
    on_old, on_new = (
        keys_of(old.client_address, addresses, 2),
        keys_of(new.client_address, addresses, 1),
    )
    tasks: list[ClusterTask] = [("t", b"p%d" % n) for n in range(4)]
    tasks += [keyed(on_old[0]), keyed(on_new[0]), ("t", b"q", Options(queue="q"), on_old[1])]
    with ClusterClient(addresses, first=0, timeout=5, clock=lambda: 0.0) as cluster:
        with pytest.raises(NeedsVersion2) as raised:
            cluster.submit_many(tasks, window=2)
        results = raised.value.results  # type: ignore[attr-defined]
        plain, refused, accepted = results[:4], [results[4], results[6]], results[5]
        assert sorted(r.daemon for r in plain) == sorted(addresses * 2)  # round-robin
        assert all(isinstance(r, NeedsVersion2) for r in refused)
        assert old.client_address in str(refused[0])
        assert isinstance(accepted, TaskRef) and accepted.daemon == new.client_address
        stats = cluster.stats()
        assert [s.queue_depth for s in stats.values()] == [2, 3]  # type: ignore[union-attr]
        assert [m.failures for m in cluster.members] == [0, 0]  # a refusal, not a loss

        # One client of a version-1 daemon: the batch before the one that
        # cannot be encoded was sent, and answered before the error.
        client = cluster.clients[old.client_address]
        with pytest.raises(NeedsVersion2) as alone:
            client.submit_many([("t", b"a"), ("t", b"b"), ("t", b"c"), keyed("x")], window=2)
        assert alone.value.results == [3, 4] and alone.value.sent == 2  # type: ignore[attr-defined]
        assert client.stats().queue_depth == 4


def test_a_task_that_cannot_be_encoded_stops_its_daemon_only(start_daemon) -> None:
    first, second = start_daemon(), start_daemon()
    addresses = [first.client_address, second.client_address]
    key, *shards = keys_of(addresses[0], addresses, 1) + keys_of(addresses[1], addresses, 3)
    good = [("t", b"g%d" % n, Options(), key) for n in range(3)]
    bad = ("t", b"bad", Options(priority=300), key)
    others = [("t", b"o%d" % n, Options(), shards[n]) for n in range(3)]
    with ClusterClient(addresses, first=0, timeout=5, clock=lambda: 0.0) as cluster:
        # On the first daemon, window 2: [g0 g1] is sent, then [g2 bad] cannot be.
        results = cluster.submit_many(
            [*good, bad, good[0], *others], return_exceptions=True, window=2
        )
        assert [r.daemon for r in results[:2]] == [addresses[0]] * 2  # type: ignore[union-attr]
        errors = results[2:5]
        assert all(isinstance(e, ValueError) and "priority" in str(e) for e in errors), errors
        assert [r.daemon for r in results[5:]] == [addresses[1]] * 3  # type: ignore[union-attr]
        assert [s.queue_depth for s in cluster.stats().values()] == [2, 3]  # type: ignore[union-attr]
        assert [m.failures for m in cluster.members] == [0, 0]
