"""
The autoscaling signal: its estimate against queueing theory, a burst and
an idle queue, its bounds, in-process on a L{Clock}; its settings' edges;
and C{/metrics} and C{/autoscale} of a real daemon that ran tasks.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.task import Clock

from quicx.daemon import config
from quicx.daemon.config.sections import AutoscaleSettings
from quicx.daemon.observe.autoscale import Autoscaler
from quicx.daemon.observe.events import Event
from quicx.model.sizing import CHUNK, Search, workers_needed
from quicx.protocol import outcomes, taskflow
from tests.daemon.observe.test_metrics import fetch, scrape, series, submit
from tests.peer import Peer

Job = tuple[int, int]  # (arrival ms, run ms)


def poisson(rate: float, mean_ms: float, count: int, seed: int, start: int = 0) -> list[Job]:
    """C{count} jobs arriving at C{rate} a second, running C{mean_ms} on average (exponential)."""
    rng = random.Random(seed)
    jobs, t = [], float(start)
    for _ in range(count):
        t += rng.expovariate(rate) * 1000
        jobs.append((int(t), int(rng.expovariate(1 / mean_ms))))
    return jobs


def erlang_c_needed(rate: float, mean_ms: float, target_ms: float) -> int:
    """M/M/c: the fewest servers with P(wait > target) at most 5 %."""
    load = rate * mean_ms / 1000
    servers = math.floor(load) + 1
    while True:
        terms = sum(load**k / math.factorial(k) for k in range(servers))
        top = load**servers / math.factorial(servers) * servers / (servers - load)
        waits = top / (terms + top)
        decay = (servers / mean_ms - rate / 1000) * target_ms
        if waits * math.exp(-decay) <= 0.05:
            return servers
        servers += 1


def events_of(jobs: list[Job], queue: str = "q", first_task: int = 0) -> list[Event]:
    """The bus's events of C{jobs}: submitted, dispatched at once, done; one worker each."""
    found: list[Event] = []
    for n, (ready, run) in enumerate(jobs, first_task):
        for ms, kind in ((ready, "submitted"), (ready, "dispatched"), (ready + run, "done")):
            worker = None if kind == "submitted" else n
            found.append((ms / 1000, kind, n, b"t", 0, 1, worker, 1, None, queue, 0))
    return sorted(found, key=lambda event: event[0])


class Fixture:
    """An L{Autoscaler} on a L{Clock}, fed events a second at a time as the bus would."""

    def __init__(self, max_queues: int = 100, **settings: Any) -> None:
        self.clock = Clock()
        self.queued: dict[str, int] = {}
        self.scaler = Autoscaler(
            AutoscaleSettings(**{"target": 0.2, **settings}),
            max_queues=max_queues,
            queued=lambda name: self.queued.get(name, 0),
            scheduler=self.clock,
            clock=self.clock.seconds,
        )

    def feed(self, events: list[Event]) -> None:
        """Advance to each event's second and hand over that second's events."""
        batch: list[Event] = []
        for event in events:
            while event[0] >= self.clock.seconds() + 1:
                self.scaler.take(batch)
                batch = []
                self.clock.advance(1)
            batch.append(event)
        if events:  # flushed once they happened
            self.clock.advance(max(0.0, events[-1][0] - self.clock.seconds()))
        self.scaler.take(batch)

    def estimate(self) -> int:
        """Run one round to its end; the reactor turns it took."""
        self.scaler.estimate()
        turns = 0
        while self.scaler._round:
            self.clock.advance(0)
            turns += 1
        return turns


@pytest.mark.parametrize("target_ms", [50, 200, 1000])
def test_steady_load_needs_what_queueing_theory_says(target_ms: int) -> None:
    rate, mean = 20.0, 400.0
    jobs = poisson(rate, mean, 1200, seed=1)
    fixture = Fixture(target=target_ms / 1000, window=70, max_jobs=1200)
    fixture.feed(events_of(jobs))
    fixture.estimate()
    found = fixture.scaler.workers("q")
    assert abs(found.workers - erlang_c_needed(rate, mean, target_ms)) <= 1, found
    assert found.arrivals == 1200 and found.runs == 1200
    assert found.p95 <= target_ms / 1000 and not found.saturated
    # The pure function the daemon's steps are, at once, says the same.
    arrivals = [ready for ready, _ in jobs]
    assert workers_needed(arrivals, [run for _, run in jobs], target_ms, 256).workers == (
        found.workers
    )


def test_a_burst_raises_the_estimate_and_an_idle_queue_falls_to_the_floor() -> None:
    fixture = Fixture(target=0.5, window=30, min_workers=1)
    steady = poisson(2, 100, 40, seed=2)
    fixture.feed(events_of(steady))
    fixture.estimate()
    before = fixture.scaler.workers("q").workers
    assert before == 1
    start = int(fixture.clock.seconds() * 1000) + 10
    burst = [(start + n, 200) for n in range(400)]  # 400 tasks in 0.4 s, 0.2 s each
    fixture.feed(events_of(burst, first_task=1000))
    fixture.estimate()
    during = fixture.scaler.workers("q")
    # 80 s of work arriving in 0.4 s, 95 % of it to start within 0.5 s: dozens of workers.
    assert during.workers >= 50 and during.p95 <= 0.5
    fixture.clock.advance(31)  # a whole window with nothing
    fixture.estimate()
    assert "q" not in fixture.scaler.windows
    assert fixture.scaler.workers("q").workers == 1  # min_workers
    assert fixture.scaler.document()["queues"] == {}
    fixture.queued["q"] = 5  # tasks queued (from before the window): one worker at least
    fixture.scaler.settings = AutoscaleSettings(target=0.5, min_workers=0)
    assert fixture.scaler.workers("q").workers == 1
    fixture.queued["q"] = 0
    assert fixture.scaler.workers("q").workers == 0


def test_what_it_keeps_is_bounded_by_its_settings() -> None:
    fixture = Fixture(max_jobs=50, max_queues=3, window=1000)
    for queue_number in range(10):
        fixture.feed(events_of(poisson(50, 10, 500, seed=queue_number), f"q{queue_number}"))
    scaler = fixture.scaler
    assert sorted(scaler.windows) == ["q0", "q1", "q2"]
    for found in scaler.windows.values():
        assert len(found.arrivals) == len(found.runs) == 50
        assert len(found.dispatched) <= 50
    assert len(scaler.reported) <= 50
    # Deliveries never reported (their worker went quiet) stay bounded too.
    stuck = [
        (float(n), "dispatched", n, b"t", 0, 1, 7, 1, None, "q0", 0) for n in range(10_000, 10_200)
    ]
    scaler.take(stuck)
    assert len(scaler.windows["q0"].dispatched) <= 50


@pytest.mark.parametrize("max_jobs", [200, 2 * CHUNK + 1])
def test_a_round_is_one_window_or_one_chunk_a_reactor_turn(max_jobs: int) -> None:
    fixture = Fixture(max_jobs=max_jobs, max_workers=64, window=1000)
    for queue in ("a", "b", "c"):
        fixture.feed(events_of(poisson(40, 100, 2 * max_jobs, seed=7), queue))
    scaler = fixture.scaler
    scaler.estimate()
    searches: dict[str, Search] = {}
    chunks = -(-max_jobs // CHUNK)  # the steps of one simulation

    def steps() -> int:
        """Windows taken, and chunks replayed."""
        for name, search, _, _ in scaler._round:
            if search is not None:
                searches.setdefault(name, search)
        return len(searches) + sum(
            len(search.p95) * chunks
            + (-(-len(search._replay.waits) // CHUNK) if search._replay is not None else 0)
            for search in searches.values()
        )

    assert steps() == 1  # the first queue's window, taken
    while scaler._round:
        # The next step waits for the reactor's next turn: one call, due now.
        (call,) = fixture.clock.calls
        assert call.getTime() == fixture.clock.seconds()
        before = steps()
        fixture.clock.calls.remove(call)
        call.func(*call.args, **call.kw)
        assert steps() == before + 1
    assert sorted(searches) == ["a", "b", "c"]
    assert all(len(search.work.ready) == max_jobs for search in searches.values())
    # Bisection over 1..64: at most 7 simulations a queue.
    assert all(len(search.p95) <= 7 for search in searches.values())
    assert scaler.longest_step > 0
    # The next round comes an interval after this one ended.
    assert [call.getTime() for call in fixture.clock.getDelayedCalls()] == [
        fixture.clock.seconds() + 5.0
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[autoscale]\ntarget = -1\n", "target"),
        ("[autoscale]\nmax_jobs = 9\n", "max_jobs"),
        ("[autoscale]\nwindow = 0.5\n", "window"),
        ("[autoscale]\nmax_workers = 0\n", "max_workers"),
    ],
)
def test_bad_autoscale_settings_name_the_line(text: str, error: str) -> None:
    with pytest.raises(config.ConfigError, match=rf"^f:2: .*{error}"):
        config.parse(text, "f")


def test_the_signal_needs_the_metrics_listener_and_a_floor_under_its_ceiling() -> None:
    with pytest.raises(config.ConfigError, match=r"target needs \[metrics\] listen"):
        config.parse("[autoscale]\ntarget = 2\n", "f")
    listen = "[metrics]\nlisten = tcp:0\n[autoscale]\ntarget = 2\n"
    with pytest.raises(config.ConfigError, match=r"min_workers \(9\) is more than max_workers"):
        config.parse(listen + "min_workers = 9\nmax_workers = 8\n", "f")
    edge = config.parse(listen + "min_workers = 8\nmax_workers = 8\n", "f")
    assert edge.autoscale.min_workers == edge.autoscale.max_workers == 8
    assert config.parse("[autoscale]\ntarget = 0\n", "f").autoscale.target == 0  # off


def wait_for(port: int, path: str, ready: Any, deadline: float = 30.0) -> dict[str, Any]:
    """C{path}'s JSON once C{ready} of it is true; fails past the deadline."""
    end = time.monotonic() + deadline
    while True:
        status, content_type, body = fetch(port, path)
        assert status == 200 and content_type == "application/json", (status, body)
        found: dict[str, Any] = json.loads(body)
        if ready(found) or time.monotonic() > end:
            assert ready(found), found
            return found
        time.sleep(0.05)


def run_tasks(worker: Peer, count: int) -> Iterator[None]:
    for _ in range(count):
        task = worker.receive()
        assert isinstance(task, taskflow.Task), task
        worker.send(outcomes.encode_ack(task.task_id, task.token))
        yield


def test_a_real_daemon_publishes_the_signal_on_metrics_and_as_json(start_daemon) -> None:
    daemon = start_daemon(
        "--metrics-listen=tcp:0:interface=127.0.0.1",
        "--autoscale-target=0.25",
        "--autoscale-interval=0.2",
    )
    port = daemon.announced_port("metrics")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        for queue, count in (("default", 20), ("nobody", 3)):
            for _ in range(count):
                assert isinstance(submit(producer, b"t", b"", queue=queue), taskflow.Ok)
        worker.send(taskflow.encode_ready(5, ["default"]))
        for _ in run_tasks(worker, 20):
            pass
        one = wait_for(
            port, "/autoscale?queue=default", lambda d: d["arrivals"] == 20 and d["runs"] == 20
        )
        assert one["queue"] == "default" and one["workers"] >= 1
        assert one["target_seconds"] == 0.25
        every = wait_for(port, "/autoscale", lambda d: {"default", "nobody"} <= set(d["queues"]))
        assert every["queues"]["nobody"]["workers"] == 1  # 3 queued, no run seen
        samples = scrape(port)
    needed = series(samples, "quicx_autoscale_workers_needed", "queue")
    assert needed[("nobody",)] == 1 and needed[("default",)] >= 1
    assert series(samples, "quicx_autoscale_target_seconds") == {(): 0.25}
    status, _, body = fetch(port, "/autoscale?queue=unknown")
    assert status == 200 and json.loads(body)["workers"] == 0


def test_the_signal_is_off_by_default(start_daemon) -> None:
    daemon = start_daemon("--metrics-listen=tcp:0:interface=127.0.0.1")
    port = daemon.announced_port("metrics")
    assert fetch(port, "/autoscale")[0] == 404
    assert not any(name.startswith("quicx_autoscale") for name in scrape(port))
