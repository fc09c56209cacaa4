"""
Clients follow a replicated shard's primary (L{quicx.clients.failover}): the
decision in process (with hypothesis), and the blocking client on real
sockets, against a real daemon as the primary and scripted standbys
(L{tests.clients.standby}) in front of it or beside it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.clients.blocking import QuicxClient
from quicx.clients.blocking_cluster import open_client
from quicx.clients.connection import Request
from quicx.clients.failover import (
    FAILOVER_DEADLINE,
    MAX_DELAY,
    Batch,
    PrimaryNotFound,
    Shard,
    lost,
    not_primary,
)
from quicx.clients.requests import Options, Task
from quicx.protocol import codec
from quicx.protocol.errors import (
    ConnectionLost,
    DaemonError,
    NotAcknowledged,
    NotFinished,
    NotPrimary,
)
from tests.clients.standby import Scripted
from tests.clients.test_worker_cluster import HANDLERS, submit, until
from tests.conftest import DaemonProcess
from tools.launcher import start_workers, stop_all

ROOT = Path(__file__).resolve().parents[2]
A, B, C = "tcp:127.0.0.1:7001", "tcp:127.0.0.1:7002", "tcp:127.0.0.1:7003"


def refusal(primary: str = "") -> NotPrimary:
    return NotPrimary(primary, codec.ErrorCode.NOT_PRIMARY)


# -- the decision, in process ----------------------------------------------------------


def test_a_named_primary_is_tried_at_once_in_the_list_s_own_spelling() -> None:
    shard = Shard(f"{A},{B},tls:127.0.0.1:7003:trustRoots=/x.pem")
    hop = shard.refused(refusal("127.0.0.1:7003"), now=0.0)
    assert (hop.address, hop.delay) == ("tls:127.0.0.1:7003:trustRoots=/x.pem", 0.0)
    assert shard.current == hop.address


def test_a_primary_outside_the_list_is_reached_over_tcp() -> None:
    hop = Shard(f"{A},{B}").refused(refusal("10.1.2.3:16381"), now=0.0)
    assert hop.address == "tcp:10.1.2.3:16381"


def test_no_primary_named_goes_round_the_list_with_backoff() -> None:
    shard = Shard(f"{A},{B},{C}")
    hops = [shard.refused(refusal(), now=0.1 * n) for n in range(5)]
    assert [h.address for h in hops] == [B, C, A, B, C]
    # Each address at once the first time in the outage, then with backoff.
    assert [h.delay for h in hops[:2]] == [0.0, 0.0]
    assert 0 < hops[2].delay <= hops[3].delay <= hops[4].delay <= MAX_DELAY


def test_the_deadline_ends_the_outage_with_a_clear_error() -> None:
    shard = Shard(f"{A},{B}", deadline=5.0)
    shard.unreachable(100.0, "refused")
    hop = shard.unreachable(104.5, "refused")
    assert hop.delay <= 0.5  # never past the deadline
    with pytest.raises(PrimaryNotFound, match=r"no primary among .*7001.*7002 for 5\.0 s"):
        shard.unreachable(105.0, "refused")


def test_a_primary_reached_ends_the_outage() -> None:
    shard = Shard(f"{A},{B}", deadline=5.0)
    shard.unreachable(0.0, "x")
    shard.reached()
    assert shard.unreachable(100.0, "x").delay == 0.0  # a new outage, its own deadline


@given(
    st.lists(st.tuples(st.booleans(), st.sampled_from(["", "127.0.0.1:7002", "h:1"])), max_size=40),
    st.floats(min_value=0.5, max_value=60),
)
def test_hops_stay_within_the_deadline_and_the_backoff(
    steps: list[tuple[bool, str]], deadline: float
) -> None:
    shard = Shard(f"{A},{B},{C}", deadline)
    now = 0.0
    for reached, named in steps:
        if reached:
            shard.reached()
            continue
        try:
            hop = shard.refused(refusal(named), now)
        except PrimaryNotFound:
            assert now >= deadline
            return
        assert 0.0 <= hop.delay <= MAX_DELAY
        assert hop.address == shard.current
        now += hop.delay + 0.3


def test_hello_says_whether_the_daemon_serves_clients() -> None:
    assert not_primary({}) is None  # no replication
    assert not_primary({"role": "primary", "epoch": 3}) is None
    for role in ("standby", "candidate", "fenced"):
        error = not_primary({"role": role, "primary": "127.0.0.1:7001"})
        assert error is not None and error.primary == "127.0.0.1:7001"
    error = not_primary({"role": "standby"})
    assert error is not None and error.primary == ""


def test_only_what_is_safe_to_send_twice_is_sent_again_after_a_lost_connection() -> None:
    keyed = Request.submit([("t", b"", Options(key="k1")), ("t", b"", Options(key="k2"))])
    assert lost(keyed, A) is None
    half = Request.submit([("t", b"", Options(key="k1")), ("t", b"")])
    assert isinstance(lost(half, A), NotAcknowledged)
    assert isinstance(lost(Request.submit([("t", b"")]), A), NotAcknowledged)
    from quicx.clients import operations

    assert lost(operations.status(), A) is None
    assert lost(operations.queues(), A) is None
    cancel = lost(operations.cancel(7), A)
    assert isinstance(cancel, ConnectionLost) and "may have been applied" in str(cancel)


def test_one_address_without_failover_is_what_it_was() -> None:
    with pytest.raises(ValueError, match="names 2 daemons"):
        QuicxClient(f"{A},{B}")
    with pytest.raises(ValueError, match="seconds above 0"):
        QuicxClient(f"{A},{B}", failover=True, failover_deadline=0)
    assert FAILOVER_DEADLINE > 10  # longer than a failover with the default lease


# -- the blocking client, on real sockets ------------------------------------------------


def queued(daemon: DaemonProcess) -> int:
    with QuicxClient(daemon.client_address) as client:
        return client.stats().queue_depth


def primary_of(daemon: DaemonProcess) -> str:
    return f"127.0.0.1:{daemon.port}"


@pytest.mark.parametrize("role", ["standby", None])
def test_a_submit_refused_by_a_standby_lands_on_the_primary_once(
    daemon: DaemonProcess, role: str | None
) -> None:
    # role None: a former primary, fenced after it answered HELLO as the primary.
    standby = Scripted(role=role, primary=primary_of(daemon))
    try:
        with QuicxClient(f"{standby.address},{daemon.client_address}", failover=True) as client:
            task_id = client.submit("resize", b"x")
            assert client.address == daemon.client_address
            assert client.task(task_id)["state"] == "queued"
        assert queued(daemon) == 1
        assert standby.refused == (1 if role is None else 0)  # a standby is left at HELLO
    finally:
        standby.close()


def test_without_failover_a_standby_s_refusal_is_raised(daemon: DaemonProcess) -> None:
    standby = Scripted(role=None, primary=primary_of(daemon))
    try:
        with QuicxClient(standby.address) as client, pytest.raises(NotPrimary) as caught:
            client.submit("resize", b"x")
        assert caught.value.primary == primary_of(daemon)
        assert queued(daemon) == 0
    finally:
        standby.close()


def test_a_standby_that_names_no_primary_sends_the_client_down_the_list(
    daemon: DaemonProcess,
) -> None:
    standby = Scripted(role="candidate", primary="")
    try:
        client = open_client([standby.address, daemon.client_address], failover=True)
        assert isinstance(client, QuicxClient)
        with client:
            assert client.stats().queue_depth == 0
            assert client.address == daemon.client_address
            client.submit("resize", b"x")
        assert queued(daemon) == 1
    finally:
        standby.close()


def test_a_keyed_submit_cut_off_before_its_answer_is_sent_again_and_counted_once(
    daemon: DaemonProcess,
) -> None:
    proxy = Scripted(upstream=daemon.address, cut_submits=1)
    try:
        with QuicxClient(f"{proxy.address},{daemon.client_address}", failover=True) as client:
            first = client.submit("charge", b"order-42", key="order-42")
            # Sent again (to the next daemon of the list) with its key: the same task.
            assert client.address == daemon.client_address
            assert client.submit("charge", b"order-42", key="order-42") == first
        assert proxy.cut_submits == 0  # it was cut
        assert queued(daemon) == 1
    finally:
        proxy.close()


def test_a_keyless_submit_cut_off_raises_and_is_not_sent_again(daemon: DaemonProcess) -> None:
    proxy = Scripted(upstream=daemon.address, cut_submits=1)
    try:
        with QuicxClient(f"{proxy.address},{daemon.client_address}", failover=True) as client:
            with pytest.raises(NotAcknowledged, match="may have accepted it"):
                client.submit("charge", b"no key")
            # The client goes on: the next call follows.
            client.submit("charge", b"next")
        assert queued(daemon) == 2  # the one that was cut off, once; and the next
    finally:
        proxy.close()


def test_submit_many_sends_the_refused_and_the_keyed_again_and_reports_the_others(
    daemon: DaemonProcess,
) -> None:
    proxy = Scripted(upstream=daemon.address, cut_submits=1)
    try:
        tasks: list[Task] = [("t", b"keyed", Options(key=f"k{n}")) for n in range(5)]
        tasks.append(("t", b"keyless"))
        with QuicxClient(f"{proxy.address},{daemon.client_address}", failover=True) as client:
            results = client.submit_many(tasks, return_exceptions=True, window=2)
            assert all(type(r) is int for r in results[:5])
            # Sent, maybe after the cut: either answered, or NotAcknowledged.
            assert type(results[5]) is int or isinstance(results[5], NotAcknowledged)
        assert queued(daemon) == 6
    finally:
        proxy.close()


def test_reads_follow_too(daemon: DaemonProcess) -> None:
    standby = Scripted(role=None, primary=primary_of(daemon))
    try:
        with QuicxClient(f"{standby.address},{daemon.client_address}", failover=True) as client:
            assert client.stats().queue_depth == 0
            assert client.address == daemon.client_address
            client.submit("resize", b"x", queue="mail")
            assert [q["name"] for q in client.queues() if q["depth"]] == ["mail"]
    finally:
        standby.close()


def test_no_primary_within_the_deadline_is_a_clear_error() -> None:
    first, second = Scripted(role="candidate"), Scripted(role=None)
    try:
        with QuicxClient(
            f"{first.address},{second.address}", failover=True, failover_deadline=1.0
        ) as client:
            began = time.monotonic()
            nobody = r"no primary among .* for \d+\.\d s"
            with pytest.raises(PrimaryNotFound, match=nobody) as caught:
                client.submit("resize", b"x")
            assert time.monotonic() - began >= 1.0
            assert isinstance(caught.value, ConnectionLost)  # what callers catch already
        assert first.connections >= 2 and second.connections >= 2
    finally:
        first.close()
        second.close()


# -- the worker runner, on real sockets --------------------------------------------------


@pytest.mark.parametrize("loop", ["twisted", "asyncio"])
@pytest.mark.parametrize("role", ["fenced", None])
def test_a_worker_follows_the_primary_and_keeps_working(
    start_daemon: Callable[..., DaemonProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    role: str | None,
    loop: str,
) -> None:
    # The shard: a proxy to a first daemon (the primary, until it is fenced);
    # a standby that names it (out of date); a second daemon, the new
    # primary that the fenced one names.
    first, second = start_daemon(), start_daemon()
    proxy = Scripted(upstream=first.address)
    standby = Scripted(role="standby", primary=f"127.0.0.1:{proxy.port}")
    log = tmp_path / "ran.log"
    log.touch()
    (tmp_path / "shard_handlers.py").write_text(HANDLERS.format(log=str(log)))
    path = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))
    connect = f"{proxy.address},{standby.address},{second.client_address}"
    workers = start_workers(
        "shard_handlers:handlers",
        1,
        ["--connect", connect, "--failover", "--concurrency", "2", "--loop", loop],
        tmp_path,
    )
    try:
        before = submit(first, "before", 5)
        until(lambda: sorted(log.read_bytes().splitlines()) == before)
        # Fenced: its connections close; a fenced daemon says so at HELLO (role),
        # or answers HELLO as the primary did and refuses READY (0x0C).
        proxy.fence(role=role, primary=f"127.0.0.1:{second.port}")
        after = submit(second, "after", 5)
        until(lambda: sorted(log.read_bytes().splitlines()) == sorted(before + after), 60.0)
        assert workers[0].poll() is None  # it never crashed
        assert standby.connections >= 1  # each slot, on its way
        if role is None:
            assert proxy.refused >= 1  # READY refused, then followed
    finally:
        stop_all(workers, 5)
        proxy.close()
        standby.close()
    assert b"Traceback" not in (tmp_path / "worker0.log").read_bytes()


def test_a_worker_s_shard_never_gives_up_and_says_so_once_a_deadline() -> None:
    shard = Shard(f"{A},{B}", deadline=5.0, forever=True)
    overdue = []
    for second in range(21):
        hop = shard.unreachable(float(second), "refused")
        assert hop.delay <= MAX_DELAY
        if hop.overdue is not None:
            overdue.append(second)
    assert overdue == [5, 10, 15, 20]  # said once each 5 s, started over after it


def test_the_docs_example_runs_as_written(daemon: DaemonProcess) -> None:
    page = (ROOT / "docs" / "clients.md").read_text()
    section = page[page.index("## Following the primary") :]
    block = re.search(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert block is not None
    standby = Scripted(role="standby", primary=primary_of(daemon))
    try:
        env = {**os.environ, "QUICX_ADDRESS": f"{standby.address},{daemon.client_address}"}
        done = subprocess.run(
            [sys.executable, "-c", block[1]], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"accepted by the primary, {daemon.client_address}\n"
        assert standby.connections == 1
        assert queued(daemon) == 1
    finally:
        standby.close()


@given(st.lists(st.booleans(), min_size=1, max_size=10), st.data())
def test_a_batch_sends_again_what_was_refused_unsent_or_keyed_and_settles_the_rest_once(
    keyed: list[bool], data: st.DataObject
) -> None:
    tasks: list[Task] = [
        ("t", b"%d" % n, Options(key=f"k{n}")) if has_key else ("t", b"%d" % n)
        for n, has_key in enumerate(keyed)
    ]
    batch = Batch(tasks)
    todo = list(range(len(tasks)))  # the model
    next_id = 1
    for _ in range(30):
        if batch.done:
            break
        assert batch.pending() == [tasks[i] for i in todo]
        answered = data.draw(st.integers(0, len(todo)))
        refused_from = data.draw(st.integers(0, answered))  # a refusal holds for all after it
        sent = data.draw(st.integers(answered, len(todo)))
        got: list[int | DaemonError] = []
        for place in range(answered):
            got.append(refusal("h:1") if place >= refused_from else next_id + place)
        refused = batch.answered(got, sent, A)
        assert (refused is not None) == (refused_from < answered)
        again = []
        for place, index in enumerate(todo):
            if place < refused_from:
                assert batch.results[index] == next_id + place
            elif place < answered or place >= sent or keyed[index]:
                again.append(index)
                assert batch.results[index] is None
            else:
                assert isinstance(batch.results[index], NotAcknowledged)
        todo = again
        next_id += len(todo) + answered + 1
    if batch.done:
        assert all(result is not None for result in batch.results)


def test_a_wait_on_the_daemon_follows(daemon: DaemonProcess) -> None:
    with QuicxClient(daemon.client_address) as direct:
        task_id = direct.submit("t", b"x", keep_result=True)
    standby = Scripted(role=None, primary=primary_of(daemon))
    try:
        shard = f"{standby.address},{daemon.client_address}"
        # AWAIT, refused by the standby (0x0C), then taken by the primary.
        with QuicxClient(shard, failover=True) as client, pytest.raises(NotFinished):
            client.result(task_id, timeout=0)
        assert standby.refused == 1
    finally:
        standby.close()
