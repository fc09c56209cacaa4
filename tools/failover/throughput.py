"""
Sync throughput beside a single daemon's: acknowledged SUBMITs per second
from one pipelining producer, on a single daemon at C{fsync = always} and
on a replicated shard's primary in C{sync} mode, alternated, in one run.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from attrs import define

from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options, Task
from tools.failover.load import QUEUE, TASK_TYPE
from tools.failover.shard import Shard, ShardConfig

BATCH = 500
"""SUBMITs pipelined at once (C{submit_many}'s window)."""
OPTIONS = Options(queue=QUEUE)
MOST = 20_000
"""The most SUBMITs one measurement sends (nothing runs them: the pool must hold them)."""


def submit_rate(address: str, seconds: float) -> float:
    """Acknowledged SUBMITs per second to C{address}, batch after batch for C{seconds}."""
    sent = 0
    with QuicxClient(address, timeout=30.0) as client:
        started = time.monotonic()
        while time.monotonic() - started < seconds and sent < MOST:
            tasks: list[Task] = [(TASK_TYPE, b"t%d" % (sent + n), OPTIONS) for n in range(BATCH)]
            client.submit_many(tasks, window=BATCH)
            sent += BATCH
        elapsed = time.monotonic() - started
    return sent / elapsed


@define
class Throughput:
    """Medians of the rounds: tasks/s on one daemon, on the sync shard (0: not measured)."""

    single: float
    sync: float = 0.0
    rounds: int = 0

    @property
    def ratio(self) -> float:
        return self.sync / self.single if self.single and self.sync else 0.0


def compare(directory: Path, replicated: bool, seconds: float = 3.0, rounds: int = 2) -> Throughput:
    """
    C{rounds} of: a fresh single daemon measured, then a fresh sync shard
    (when C{replicated}); the medians.
    """
    single: list[float] = []
    sync: list[float] = []
    for n in range(rounds):
        with Shard(directory / f"single{n}", ShardConfig(replicated=False)) as shard:
            single.append(submit_rate(shard.nodes[0].address, seconds))
        if replicated:
            with Shard(directory / f"sync{n}", ShardConfig()) as shard:
                sync.append(submit_rate(shard.wait_primary().address, seconds))
    return Throughput(statistics.median(single), statistics.median(sync) if sync else 0.0, rounds)
