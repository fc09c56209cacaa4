"""
The matrix's rows: one fault each, injected into a shard under load, healed,
and counted (L{run_row}).  Each fault is a function of the shard; each row
names its fault and the shard's settings.

Rows that need replication are skipped (L{NEEDS}) when this quicx has no
C{[replication]} section, or when asked for a single daemon; the others run
on a single daemon at C{fsync = always} then (the dry run of the harness:
a kill -9 is a restart, a SIGSTOP a pause).
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from pathlib import Path

from attrs import define, evolve, field

from tools.failover.count import Counts, count
from tools.failover.load import Load
from tools.failover.proxy import BLACKHOLE
from tools.failover.shard import Node, Shard, ShardConfig

NEEDS = "needs [replication]"
WARMUP = 3.0
"""Seconds of load before the fault."""
AFTER = 6.0
"""Seconds of load after the fault is healed (and acknowledgements resumed)."""
RESUME = 60.0
"""The longest wait for acknowledgements to resume after a fault."""
TAKEOVER = 30.0
"""The longest a fault waits for another daemon to take the primary's place."""
FAILOVER_TARGET = 10.0
"""Seconds without a primary a failover may take (sync mode, default settings)."""


@define
class RowResult:
    """One row's figures (C{counts}), or why it was skipped."""

    row: str
    shard: str
    counts: Counts | None = None
    skipped: str = ""
    error: str = ""
    """Why the row could not be run to its end (a shard that did not start, say)."""
    notes: list[str] = field(factory=list)
    failover: bool = False
    """Whether the row moves the primary (its seconds without one are held to the target)."""

    def misses(self) -> list[str]:
        """The targets this row misses (sync mode): none when skipped."""
        c = self.counts
        if self.error:
            return [f"error: {self.error}"]
        if c is None:
            return []
        missed = []
        if c.lost:
            missed.append(f"{c.lost} acknowledged lost")
        if c.stale_applied:
            missed.append(f"{c.stale_applied} stale outcomes applied")
        if c.undrained:
            missed.append(f"{c.undrained} not drained")
        if self.failover and max(c.no_primary_s, c.ack_gap_s) > FAILOVER_TARGET:
            missed.append(f"failover {max(c.no_primary_s, c.ack_gap_s):.1f} s")
        return missed


Fault = Callable[[Shard], list[str]]
"""Injects a fault into the shard, heals it, and says what it did (notes)."""


def primary(shard: Shard) -> Node:
    return shard.wait_primary()


def standby(shard: Shard) -> Node:
    leader = shard.wait_primary()
    return next(node for node in shard.nodes if node is not leader)


def hold(seconds: float) -> None:
    """The fault lasts C{seconds} (the row's definition, not a settling wait)."""
    time.sleep(seconds)


def takeover(shard: Shard, node: Node) -> list[str]:
    """
    Wait for another daemon than C{node} to become primary (when there is
    another), at most L{TAKEOVER} seconds: a note if none did.
    """
    if not shard.config.replicated:
        return []
    try:
        shard.wait_primary(TAKEOVER, other_than=node)
    except RuntimeError as e:
        return [f"no other daemon took over: {e}"]
    return []


def kill_primary(shard: Shard) -> list[str]:
    """kill -9 of the primary; it restarts once another took over (a standby then)."""
    node = primary(shard)
    with node.down():
        node.daemon.kill()
        killed = time.monotonic()
        notes = takeover(shard, node)
        node.daemon.start(timeout=60.0)
    return [f"{node.name} killed; {time.monotonic() - killed:.1f} s to a primary again", *notes]


def zombie(shard: Shard) -> list[str]:
    """
    SIGSTOP of the primary until another is elected (when there is another),
    then past the lease TTL, then SIGCONT: a zombie that wakes up.
    """
    node = primary(shard)
    node.pause()
    try:
        notes = takeover(shard, node)
        hold(shard.config.lease_ttl + 3.0)
    finally:
        node.resume()
    return [f"{node.name} stopped, then woken {shard.config.lease_ttl + 3.0:g} s later", *notes]


def partition(kind: str, seconds: Callable[[ShardConfig], float]) -> Fault:
    """Cut the primary's C{kind} proxy (a blackhole) for C{seconds(config)}, then heal it."""

    def fault(shard: Shard) -> list[str]:
        node = primary(shard)
        proxy = getattr(node, kind)
        proxy.cut(BLACKHOLE)
        try:
            hold(seconds(shard.config))
        finally:
            proxy.heal()
        return [f"{proxy.name} blackholed {seconds(shard.config):g} s"]

    return fault


def fill(directory: Path) -> int:
    """Write a file in C{directory} until its file system is full: the bytes written."""
    written = 0
    block = b"\0" * (1 << 16)
    with (directory / "filler").open("wb", buffering=0) as filler:
        while True:
            try:
                written += filler.write(block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                return written


def standby_disk_full(shard: Shard) -> list[str]:
    """The standby's journal tmpfs filled for a while, then room made again."""
    node = standby(shard)
    written = fill(node.journal_dir)
    try:
        hold(shard.config.standby_timeout + 4.0)
    finally:
        (node.journal_dir / "filler").unlink()
    return [f"{node.name}'s journal file system full ({written} bytes filled)"]


def standby_from_nothing(shard: Shard) -> list[str]:
    """kill -9 of the standby, its data wiped, restarted: it must catch up from a snapshot."""
    node = standby(shard)
    with node.down():
        node.daemon.kill()
        node.wipe()
        started = time.monotonic()
        node.daemon.start(timeout=60.0)
    shard.wait_role(node, "standby")
    return [f"{node.name} wiped; standby again after {time.monotonic() - started:.1f} s"]


def kill_etcd(shard: Shard) -> list[str]:
    """kill -9 of etcd for longer than the lease TTL, then restarted on its data."""
    assert shard.etcd is not None
    shard.etcd.kill()
    hold(shard.config.lease_ttl + 3.0)
    shard.start_etcd()
    return [f"etcd killed for {shard.config.lease_ttl + 3.0:g} s"]


@define(frozen=True)
class Row:
    name: str
    fault: Fault
    config: ShardConfig = field(factory=ShardConfig)
    replicated_only: bool = True
    failover: bool = False
    what: str = ""


ROWS = (
    Row("kill-primary", kill_primary, replicated_only=False, failover=True,
        what="kill -9 of the primary"),
    Row("zombie", zombie, replicated_only=False, failover=True,
        what="SIGSTOP of the primary past the lease TTL, then SIGCONT"),
    Row("partition-clients", partition("clients", lambda c: 4.0), replicated_only=False,
        what="clients ↔ primary blackholed 4 s"),
    Row("partition-etcd", partition("etcd", lambda c: c.lease_ttl + 3.0), failover=True,
        what="primary ↔ etcd blackholed past the lease TTL"),
    Row("partition-standby-wait", partition("replication", lambda c: c.standby_timeout + 4.0),
        what="primary ↔ standby blackholed, standby_lost = wait"),
    Row("partition-standby-async", partition("replication", lambda c: c.standby_timeout + 4.0),
        ShardConfig(standby_lost="async"),
        what="primary ↔ standby blackholed, standby_lost = async"),
    Row("standby-disk-full", standby_disk_full,
        ShardConfig(standby_lost="async", journal_tmpfs=16 << 20),
        what="the standby's journal file system full, then freed (standby_lost = async)"),
    Row("standby-from-nothing", standby_from_nothing,
        what="the standby killed, its data wiped, restarted"),
    Row("kill-etcd", kill_etcd, what="kill -9 of etcd past the lease TTL, then restarted"),
)  # fmt: skip
BY_NAME = {row.name: row for row in ROWS}


def wait_acks(load: Load, count: int, timeout: float) -> bool:
    """Whether C{count} more acknowledgements come within C{timeout} seconds."""
    target = len(load.trace.acks) + count
    deadline = time.monotonic() + timeout
    while len(load.trace.acks) < target:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_row(
    row: Row,
    directory: Path,
    replicated: bool,
    rate: float = 40.0,
    work: float = 0.02,
    drain: float = 60.0,
) -> RowResult:
    """
    Run C{row} in C{directory}: its shard (a single daemon unless
    C{replicated}), the load (C{rate} SUBMITs a second per producer, each
    task held C{work} seconds by its worker), the fault, the drain (at most
    C{drain} seconds) and the count.
    """
    config = row.config if replicated else evolve(row.config, replicated=False)
    result = RowResult(row.name, config.describe(), failover=row.failover)
    if row.replicated_only and not replicated:
        result.skipped = NEEDS
        return result
    directory.mkdir(parents=True, exist_ok=True)
    with Shard(directory, config) as shard:
        load = Load(row.name, shard.addresses, shard.roles, rate=rate, work=work)
        load.start()
        try:
            if not wait_acks(load, 20, RESUME):
                raise RuntimeError(f"no load before the fault: {load.errors()[-3:]}")
            hold(WARMUP)
            result.notes += row.fault(shard)
            if not wait_acks(load, 10, RESUME):
                result.notes.append(f"acknowledgements did not resume within {RESUME:g} s")
            hold(AFTER)
            load.stop_producing()
            load.finish(shard.wait_primary().address, drain)
        finally:
            load.close()
        result.counts = count(load.trace, load.started, load.stopped)
        result.notes += [f"supervisor: {r}, restarted" for r in shard.restarts]
    return result
