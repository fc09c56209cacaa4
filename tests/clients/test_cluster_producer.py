"""
Placing tasks on the daemons of a cluster (L{quicx.clients.cluster}), in
process: rendezvous hashing, the spreads, the members' backoff, task refs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import quicx
from quicx.cli import main
from quicx.clients.blocking import QuicxClient
from quicx.clients.blocking_cluster import ClusterClient, open_client
from quicx.clients.cluster import (
    FIRST_RETRY,
    LAST_RETRY,
    LEAST_LOADED,
    Cluster,
    TaskRef,
    ranking,
)

THREE = "tcp:10.0.0.1:16381,tcp:10.0.0.2:16381,tcp:10.0.0.3:16381"
KEYS = [f"order-{n}" for n in range(3000)]


def documented_choice(key: str, addresses: list[str]) -> str:
    """The daemon the documentation says a key goes to, computed here from its words."""

    def weight(address: str) -> int:
        digest = hashlib.blake2b(f"{address}\0{key}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    return max(addresses, key=weight)


def test_a_key_goes_to_the_daemon_of_highest_weight() -> None:
    cluster = Cluster.of(THREE, first=0)
    for key in KEYS[:200]:
        assert cluster.place(key, 0.0) == documented_choice(key, cluster.addresses)


def test_a_key_goes_to_the_same_daemon_in_another_process() -> None:
    script = (
        "from quicx.clients.cluster import Cluster\n"
        f"cluster = Cluster.of({THREE!r})\n"
        f"print(' '.join(cluster.place(k, 0.0) for k in {KEYS[:50]!r}))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # another str hash: placement ignores it
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", script]
    other = subprocess.run(command, capture_output=True, text=True, check=True, env=env, cwd=root)
    here = Cluster.of(THREE, first=0)
    assert other.stdout.split() == [here.place(k, 0.0) for k in KEYS[:50]]


def test_keys_spread_over_the_daemons() -> None:
    cluster = Cluster.of(THREE, first=0)
    counts = Counter(cluster.place(key, 0.0) for key in KEYS)
    print("keys per daemon:", dict(counts))
    assert len(counts) == 3
    assert all(800 <= n <= 1200 for n in counts.values()), counts


def test_a_down_daemon_moves_only_its_own_keys_to_their_next_choice() -> None:
    cluster = Cluster.of(THREE, first=0)
    before = {key: cluster.place(key, 0.0) for key in KEYS}
    down = cluster.addresses[1]
    cluster.lost(down, now=10.0)
    after = {key: cluster.place(key, 10.0) for key in KEYS}
    moved = {key for key in KEYS if before[key] != after[key]}
    assert moved == {key for key in KEYS if before[key] == down}
    for key in moved:
        assert after[key] == ranking(key, cluster.addresses)[1]
    # Back after its wait: every key goes home.
    assert {key: cluster.place(key, 10.0 + FIRST_RETRY) for key in KEYS} == before


def test_a_removed_daemon_moves_only_its_keys() -> None:
    three = Cluster.of(THREE, first=0)
    two = Cluster.of(three.addresses[:2])
    for key in KEYS:
        if three.place(key, 0.0) != three.addresses[2]:
            assert two.place(key, 0.0) == three.place(key, 0.0)


def test_an_added_daemon_takes_keys_from_the_others_and_moves_no_other() -> None:
    three = Cluster.of(THREE, first=0)
    four = Cluster.of([*three.addresses, "tcp:10.0.0.4:16381"])
    moved = [key for key in KEYS if four.place(key, 0.0) != three.place(key, 0.0)]
    assert {four.place(key, 0.0) for key in moved} == {"tcp:10.0.0.4:16381"}
    assert 500 <= len(moved) <= 1000  # about a quarter


def test_the_spelling_of_an_address_does_not_matter() -> None:
    bare = Cluster.of("10.0.0.1:16381,10.0.0.2:16381,10.0.0.3:16381")
    assert bare.addresses == Cluster.of(THREE, first=0).addresses
    assert [bare.place(k, 0.0) for k in KEYS[:20]] == [
        Cluster.of(THREE, first=0).place(k, 0.0) for k in KEYS[:20]
    ]


def test_round_robin_takes_each_live_daemon_in_turn() -> None:
    cluster = Cluster.of(THREE, first=0)
    a, b, c = cluster.addresses
    assert [cluster.place(None, 0.0) for _ in range(6)] == [a, b, c, a, b, c]
    cluster.lost(b, now=0.0)
    assert [cluster.place(None, 0.0) for _ in range(4)] == [a, c, a, c]


def test_least_loaded_takes_the_daemon_with_the_fewest_awaiting_answers() -> None:
    cluster = Cluster.of(THREE, spread=LEAST_LOADED, first=0)
    a, b, c = cluster.addresses
    cluster.sent(a, 5)
    cluster.sent(b, 2)
    assert cluster.place(None, 0.0) == c
    cluster.sent(c, 3)
    assert cluster.place(None, 0.0) == b
    cluster.answered(a, 5)
    assert cluster.place(None, 0.0) == a
    # Equals take turns, as in round-robin.
    cluster.answered(b, 2)
    cluster.answered(c, 3)
    assert [cluster.place(None, 0.0) for _ in range(3)] == [b, c, a]


def test_a_batch_is_placed_as_its_tasks_one_by_one() -> None:
    batch, single = Cluster.of(THREE, first=0), Cluster.of(THREE, first=0)
    a, b, c = batch.addresses
    for cluster in (batch, single):
        cluster.lost(b, now=0.0)
    keys = [None, "order-1", None, None, "order-2", None]
    placed = batch.place_many(keys, 0.0)
    assert placed == [single.place(key, 0.0) for key in keys]
    assert [placed[i] for i in (0, 2, 3, 5)] == [a, c, a, c]
    assert [placed[i] for i in (1, 4)] == [documented_choice(k, [a, c]) for k in KEYS[1:3]]
    assert batch.place_many(keys, 0.0, avoid={a, b, c}) == [None] * len(keys)


def test_an_unknown_spread_is_refused() -> None:
    with pytest.raises(ValueError, match="round-robin or least-loaded"):
        Cluster.of(THREE, spread="random")


def test_a_down_daemon_waits_longer_after_each_failure_then_is_live_again() -> None:
    cluster = Cluster.of(THREE, first=0)
    a = cluster.member(cluster.addresses[0])
    waits = []
    for _ in range(10):
        cluster.lost(a.address, now=0.0)
        assert not a.live(0.0)
        waits.append(a.retry_at)
    assert waits[:3] == [FIRST_RETRY, 2 * FIRST_RETRY, 4 * FIRST_RETRY]
    assert waits[-1] == LAST_RETRY
    assert a.live(LAST_RETRY)
    cluster.reached(a.address)
    assert a.failures == 0 and a.live(0.0)


def test_when_every_daemon_is_down_each_is_tried() -> None:
    cluster = Cluster.of(THREE, first=0)
    for address in cluster.addresses:
        cluster.lost(address, now=0.0)
    assert [cluster.place(None, 0.0) for _ in range(3)] == cluster.addresses
    assert cluster.place("order-1", 0.0) == ranking("order-1", cluster.addresses)[0]


def test_a_task_avoids_the_daemons_that_just_failed_it_even_once_their_wait_is_over() -> None:
    cluster = Cluster.of(THREE, first=0)
    a, b, c = cluster.addresses
    key = next(k for k in KEYS if ranking(k, cluster.addresses)[0] == a)
    cluster.lost(a, now=0.0)
    later = LAST_RETRY  # a is live again, as far as time goes
    assert cluster.place(key, later) == a
    assert cluster.place(key, later, avoid={a}) == ranking(key, cluster.addresses)[1]
    assert cluster.place(None, later, avoid={a, b}) == c
    assert cluster.place(key, later, avoid={a, b, c}) is None


def test_a_task_ref_reads_back_from_its_text() -> None:
    ref = TaskRef(42, "10.0.0.2:16381")
    assert ref.daemon == "tcp:10.0.0.2:16381"
    assert str(ref) == "42@tcp:10.0.0.2:16381"
    assert TaskRef.parse(str(ref)) == ref
    assert int(ref) == 42
    assert TaskRef.parse("7@unix:/run/a@b.sock") == TaskRef(7, "unix:/run/a@b.sock")
    # The same id on two daemons is two tasks.
    assert len({TaskRef(1, "h1:1"), TaskRef(1, "h2:1")}) == 2


@pytest.mark.parametrize("text", ["42", "@tcp:h:1", "0@tcp:h:1", "x@tcp:h:1", "42@"])
def test_a_malformed_task_ref_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="ID@ADDRESS"):
        TaskRef.parse(text)


def test_a_ref_to_another_cluster_is_refused_before_anything_is_sent() -> None:
    with ClusterClient(THREE) as cluster:
        with pytest.raises(ValueError, match="not one of this cluster's daemons"):
            cluster.wait("1@tcp:10.9.9.9:16381")
        with pytest.raises(ValueError, match="ID@ADDRESS"):
            cluster.result("1")


def test_open_client_is_a_plain_client_for_one_address_and_a_cluster_for_several(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert type(open_client("10.0.0.1:16381")) is QuicxClient
    assert type(open_client(["10.0.0.1:16381"])) is QuicxClient
    with open_client(THREE) as cluster:
        assert isinstance(cluster, ClusterClient)
        assert cluster.addresses == tuple(THREE.split(","))
    monkeypatch.setenv("QUICX_ADDRESS", THREE)
    assert isinstance(quicx.open_client(), quicx.ClusterClient)
    with pytest.raises(ValueError, match="named twice"):
        open_client("h:1,h:1")


ONE_OF_THREE = "names 3 daemons, and a task id means something on one"


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [
        (["task", "7", "--connect", THREE], 2, ONE_OF_THREE),
        (["result", "7"], 2, ONE_OF_THREE),
        (["queues"], 2, "quicx queues talks to one daemon, and --connect (or $QUICX_ADDRESS)"),
        (
            ["cancel", "7@10.0.0.2:16381"],
            2,
            "the --config of the daemon at tcp:10.0.0.2:16381 (and --instance I",
        ),
        (["task", "7@"], 2, "'7@' is not a task ID@ADDRESS"),
        (["submit", "t", "x", "--connect", "h:1,,h:2"], 1, "bad address list: 'h:1,,h:2'"),
    ],
)
def test_the_command_wants_a_task_with_its_daemon_when_it_has_several(
    argv: list[str],
    status: int,
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("QUICX_ADDRESS", THREE)
    code: str | int | None
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's
        code = e.code
    assert code == status
    error = capsys.readouterr().err
    assert says in error
    assert len(error.strip().splitlines()) == 1


def test_round_robin_begins_at_a_random_daemon_unless_told() -> None:
    """A loop of one-task producers (C{quicx submit}) spreads its tasks."""
    firsts = {Cluster.of(THREE).place(None, 0.0) for _ in range(100)}
    assert firsts == set(Cluster.of(THREE).addresses)  # each: 1 - (2/3)^100 sure
    assert {Cluster.of(THREE, first=2).place(None, 0.0) for _ in range(5)} == {
        Cluster.of(THREE).addresses[2]
    }
