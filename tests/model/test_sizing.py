"""
The autoscaling signal's search (L{quicx.model.sizing}) gives the answers of
the dispatch model it stands for: its first-come-first-served replay the
same waits as L{quicx.model.dispatch.simulate}, its bisection the same
counts as trying every number of workers with C{simulate}, over a real
recording's windows and bursty, tied and idle ones; and no step replays
more than L{CHUNK} jobs.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from quicx.model.dispatch import percentile, simulate
from quicx.model.sizing import CHUNK, QUANTILE, Replay, Search, Window, window, workers_needed
from quicx.report.whatif import workload
from tools.autoscale_sim import bursty

RECORDING = Path(__file__).parents[1] / "data" / "events-v1"


def simulated_waits(work: Window, workers: int) -> list[int]:
    return [wait for _, _, wait in simulate(work, workers).waits]


def replayed_waits(work: Window, workers: int) -> list[int]:
    replay = Replay(work, workers)
    while not replay.advance():
        pass
    return replay.waits


def fewest_by_simulation(work: Window, target: float, most: int) -> tuple[int, float]:
    """The definition: the fewest workers whose simulated p95 wait is at most C{target}."""
    if not work.ready:
        return 0, 0.0
    for workers in range(1, most + 1):
        p95 = percentile(simulated_waits(work, workers), QUANTILE)
        if p95 <= target:
            return workers, p95
    return most, p95


def recorded_windows() -> list[Window]:
    """Every 10 s of a real recording, the last 60 s of its arrivals and run times."""
    records = [
        json.loads(line)
        for path in sorted(RECORDING.glob("events-*.ndjson"))
        for line in path.read_text().splitlines()
    ]
    for record in records:
        record["queue"] = record.get("queue") or "default"
    jobs = workload(records).jobs
    first, last = jobs[0].ready, jobs[-1].ready
    found = []
    for now in range(first, last + 10_000, 10_000):
        recent = [job for job in jobs if now - 60_000 <= job.ready <= now]
        runs = [step.run for job in recent for step in job.steps]
        found.append(window([job.ready for job in recent], runs, len(recent) % 3, now))
    return [w for w in found if w.ready]


def synthetic_windows() -> list[Window]:
    """Bursts (tools.autoscale_sim's), ties at one millisecond, zero run times, a backlog."""
    rng = random.Random(7)
    found = []
    for seed in range(4):
        arrivals = bursty(40.0, seed)
        ready = sorted(int(a.at * 1000) for a in arrivals)
        found.append(window(ready, [a.run_ms for a in arrivals], seed * 5, ready[-1]))
    for _ in range(12):
        ready = sorted(rng.choice((0, 5, 10, 10, 10)) + rng.randrange(200) for _ in range(300))
        runs = [rng.choice((0, 0, 1, 7, 30, 90)) for _ in range(rng.randint(1, 50))]
        found.append(window(ready, runs, rng.randrange(20), ready[-1]))
    found.append(window([], [], 4, 1000))  # only a backlog
    found.append(window([5, 5, 5], [], 0, 5))  # no run times yet
    return found


WINDOWS = recorded_windows() + synthetic_windows()


def test_recording_gives_windows() -> None:
    assert len(recorded_windows()) >= 5


@pytest.mark.parametrize("index", range(len(WINDOWS)))
def test_replay_waits_are_the_simulations(index: int) -> None:
    work = WINDOWS[index]
    for workers in (1, 2, 3, 7, 40):
        assert Counter(replayed_waits(work, workers)) == Counter(simulated_waits(work, workers))


@pytest.mark.parametrize("index", range(len(WINDOWS)))
@pytest.mark.parametrize("target", [0.0, 50.0, 1000.0])
def test_search_gives_the_simulations_count(index: int, target: float) -> None:
    work = WINDOWS[index]
    search = Search(work, target, 64)
    while not search.step():
        pass
    expected = fewest_by_simulation(work, target, 64)
    assert (search.result.workers, search.result.p95) == expected
    assert search.result.saturated == (expected[1] > target)


def test_no_step_replays_more_than_a_chunk() -> None:
    ready = list(range(5 * CHUNK + 3))
    search = Search(window(ready, [3]), 0.0, 8)
    steps = 1
    while not search.step():
        replay = search._replay
        assert replay is None or len(replay.waits) % CHUNK == 0  # a chunk a step
        steps += 1
    assert search.result.workers == 3
    assert steps == 6 * search.result.simulations  # 5 full chunks and 3 jobs each


def test_workers_needed_is_the_search_to_its_end() -> None:
    found = workers_needed([0, 0, 0, 0], [100], 0.0, 10)
    assert (found.workers, found.p95, found.saturated) == (4, 0.0, False)
    assert workers_needed([], [], 10.0, 5).workers == 0
