"""
Each workload as the command runs it: its size (a tenth with C{--quick}),
the peer's run beside it, its printed line and its JSON record.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attrs import Factory, define

from quicx.protocol import wire
from tools import echo
from tools.abuse import abuse_workload
from tools.abuse import line_of as abuse_line
from tools.bench.chart import latency_svg
from tools.bench.delays import (
    PROBE_INTERVAL,
    delays_dispatch_workload,
    delays_idle_workload,
    delays_memory_workload,
)
from tools.bench.dependencies import FANIN_SIZES, edges_workload, fanin_cost_workload
from tools.bench.memory import task_memory_workload
from tools.bench.observability import (
    V2_FEATURES,
    monitor_workload,
    observability_workload,
    v2_features_workload,
)
from tools.bench.openloop import LOADS, openloop_workload
from tools.bench.peers import QUICX_ADAPTER, peer_run
from tools.bench.report import report_workload
from tools.bench.rig import BENCH_TYPE, ONE_TASK_EACH, RESULT_SIZE, payload_of, percentiles
from tools.bench.scale import (
    INDEPENDENT,
    SCALE_DAEMONS,
    SCALE_MODES,
    scale_workload,
)
from tools.bench.starvation import starvation_workload
from tools.bench.throughput import (
    CLIENT_LOOPS,
    clients_workload,
    e2e_workload,
    events_workload,
    fanin_workload,
    fsync_workload,
    idle_workload,
    journal_workload,
    latency_workload,
    memory_workload,
    submit_workload,
)


@define
class Session:
    """
    What every run of one command shares.

    @ivar peers: the peer harness, if it runs (L{find_peers}).
    @ivar python: the harness's Python (L{peer_python}).
    @ivar journal_dir: where the journal and events workloads write.
    @ivar table: every record emitted, in order (C{--json-out}).
    """

    args: argparse.Namespace
    peers: Path | None
    python: str
    journal_dir: Path
    table: list[dict[str, Any]] = Factory(list)

    @property
    def scale(self) -> int:
        """What the workloads' sizes are divided by: 10 with C{--quick}."""
        return 10 if self.args.quick else 1

    def peer(self, workload: str, n: int, payload: int = 100) -> dict[str, Any] | None:
        """beanstalkd's figures for C{workload}, if the peer harness runs."""
        if not self.peers:
            return None
        return peer_run(self.peers, self.python, "beanstalkd", workload, n, payload)

    def emit(self, name: str, line: str, figures: dict[str, Any]) -> None:
        emit(name, line, figures, self.table)

    def emit_e2e(
        self, name: str, ours: dict[str, Any], theirs: dict[str, Any] | None, note: str = ""
    ) -> None:
        cpu = ours["cpu_us_per_task"]
        rate = f"{ours['tasks_per_s']:,.0f} tasks/s"
        line = rate + ratio(ours["tasks_per_s"], theirs, "jobs_per_s")
        line += (
            f"; CPU µs/task daemon {cpu['daemon']:.1f}, workers {cpu['workers']:.1f},"
            f" producer {cpu['producer']:.1f}{note}"
        )
        self.emit(name, line, {**ours, "peer": theirs})


def emit(name: str, line: str, figures: dict[str, Any], table: list[dict[str, Any]]) -> None:
    print(f"{name:<22} {line}", flush=True)
    record = {"workload": name, **figures}
    print(json.dumps(record), flush=True)
    table.append(record)


def ratio(ours: float, theirs: dict[str, Any] | None, key: str) -> str:
    """Quicx against beanstalkd on C{key}, if the peer ran."""
    if not theirs or key not in theirs:
        return ""
    return f"   beanstalkd {theirs[key]:,.0f}, ratio {ours / theirs[key]:.2f}x"


def run_submit(s: Session) -> None:
    ours = submit_workload(200_000 // s.scale)
    theirs = s.peer("enqueue", 200_000 // s.scale)
    s.emit(
        "submit",
        f"{ours['oks_per_s']:,.0f} OKs/s ({ours['oks_per_s'] / 350_000:.2f} of the goal 350k)"
        + ratio(ours["oks_per_s"], theirs, "jobs_per_s"),
        {**ours, "peer": theirs},
    )


def run_e2e(s: Session) -> None:
    n = 200_000 // s.scale
    ours = e2e_workload(n)
    theirs = s.peer("e2e", n)
    s.emit_e2e("e2e", ours, theirs)
    # Without the credit extension: what a protocol-page-only worker gets.
    s.emit_e2e("e2e one task/conn", e2e_workload(n, layout=ONE_TASK_EACH), theirs)
    s.emit_e2e("e2e one task/worker", e2e_workload(n // 4, layout=(1, 1)), theirs)
    # What a user gets: `quicx worker module:handlers`, no flags.
    # Issue 35's target 2: >= 5x beanstalkd; worker and producer <= 3 µs a task.
    stock = e2e_workload(n, layout=None)
    cpu = stock["cpu_us_per_task"]
    note = (
        f" (goal 3 µs each: ratios {cpu['workers'] / 3:.2f}, {cpu['producer'] / 3:.2f};"
        " and >= 5x beanstalkd)"
    )
    s.emit_e2e("e2e stock worker", stock, theirs, note)


def run_v2(s: Session) -> None:
    # Side by side, alternated: version 1 (one queue) against version 2
    # (4 queues x 3 priorities, then with each feature), each the
    # median of its rounds.
    rounds, n = 3, 100_000 // s.scale
    submits: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(rounds):
        for protocol in (1, 2):
            submits[protocol].append(submit_workload(n, protocol)["oks_per_s"])
    v1, v2 = (statistics.median(submits[p]) for p in (1, 2))
    s.emit(
        "v2 submit",
        f"v1 {v1:,.0f}/s  v2 (4 queues x 3 priorities) {v2:,.0f}/s"
        f"  (median of {rounds}, alternated): ratio {v2 / v1:.2f}",
        {"n": n, "rounds": rounds, "v1": submits[1], "v2": submits[2]},
    )
    features = v2_features_workload(n, rounds)
    plain, cpu = features["median"]["v1"], features["median_daemon_us"]
    for name in V2_FEATURES[1:]:
        rate = features["median"][name]
        s.emit(
            f"v2 e2e {name[3:] or 'plain'}",
            f"{rate:,.0f} tasks/s, daemon {cpu[name]:.1f} µs/task;  v1 {plain:,.0f},"
            f" {cpu['v1']:.1f} µs  (median of {rounds}, alternated): ratio {rate / plain:.2f}",
            {"n": n, "rounds": rounds, "run": name, **features},
        )


def run_idle(s: Session) -> None:
    for name, busy_poll in (("idle", None), ("idle no busy-poll", 0.0)):
        ours = idle_workload(30 / s.scale, busy_poll)
        s.emit(
            name,
            f"daemon {ours['daemon_percent']:.2f} % of a CPU,"
            f" busiest worker {ours['worker_percent']:.2f} %",
            ours,
        )


def run_latency(s: Session) -> None:
    n = 5000 // s.scale
    theirs = s.peer("latency", n)
    # Stock workers; the daemon and the workers with their default
    # busy polling (100 µs), then with none.
    for name, busy_poll in (("latency", None), ("latency no busy-poll", 0.0)):
        ours = latency_workload(n, busy_poll)
        keys = ("p50_us", "p90_us", "p99_us", "max_us")
        line = " ".join(f"{k[:-3]} {ours[k]:,.0f}" for k in keys)
        if theirs and "p50_us" in theirs:
            line += (
                f" µs   beanstalkd p50 {theirs['p50_us']:,.0f} p99 {theirs['p99_us']:,.0f},"
                f" p50 ratio {ours['p50_us'] / theirs['p50_us']:.2f}x"
            )
        s.emit(name, line, {**ours, "peer": theirs})
    # The floor: a task's round trip takes two round trips at least
    # (producer <-> daemon, daemon <-> worker), here through a bare
    # Python socket echo server.
    submit = wire.encode_submit(BENCH_TYPE.encode(), payload_of(100))
    floor = percentiles(echo.floor("socket", submit, n))
    s.emit(
        "latency floor",
        f"two bare socket round trips: p50 {floor['p50_us']:,.1f} µs",
        floor,
    )


def run_roundtrip(s: Session) -> None:
    # Issue 35's target 3, side by side in one run: a task's round trip
    # (stock workers, default busy polling) against beanstalkd's and
    # against the awake floor: one bare loopback round trip of a SUBMIT's
    # bytes with both sides spinning (two such round trips beside it).
    n = 5000 // s.scale
    ours = latency_workload(n)
    theirs = s.peer("latency", n)
    submit = wire.encode_submit(BENCH_TYPE.encode(), payload_of(100))
    one = percentiles(echo.floor("spin", submit, n, trips=1))["p50_us"]
    two = percentiles(echo.floor("spin", submit, n))["p50_us"]
    line = f"p50 {ours['p50_us']:,.0f} µs; awake floor {one:.1f} µs (two trips {two:.1f}):"
    line += f" ratio {ours['p50_us'] / one:.2f}x (goal <= 2.5x)"
    if theirs and "p50_us" in theirs:
        line += (
            f"; beanstalkd p50 {theirs['p50_us']:,.0f} µs:"
            f" ratio {ours['p50_us'] / theirs['p50_us']:.2f}x (goal <= 0.6x)"
        )
    s.emit(
        "round trip",
        line,
        {**ours, "awake_floor_us": one, "awake_floor_two_us": two, "peer": theirs},
    )


def run_openloop(s: Session) -> None:
    # Issue 35's target 3: tasks sent on a schedule at 25, 50, 75 % of the
    # measured maximum, the daemon pinned, five runs each (openloop.py).
    ours = openloop_workload(2.0 / s.scale)
    for load in (f"{share:.0%}" for share in LOADS):
        figures = ours["loads"][load]
        goal = "  (goal p99 < 1,000 µs)" if load == "50%" else ""
        s.emit(
            f"open loop {load}",
            f"{figures['rate']:,} tasks/s offered ({load} of {ours['max_tasks_per_s']:,.0f} paced;"
            f" a burst {ours['burst_tasks_per_s']:,.0f}):"
            + " ".join(f" {p} {figures[p]:,.0f}" for p in ("p50", "p90", "p99", "p99.9"))
            + f" µs over {figures['tasks']:,} tasks, {ours['runs']} runs; load average"
            f" {ours['load_average']:.1f}{goal}",
            {"load": load, **{k: v for k, v in ours.items() if k != "loads"}, **figures},
        )
    if s.args.chart:
        title = (
            f"Quicx open-loop latency, 2 stock workers, daemon pinned; maximum paced"
            f" {ours['max_tasks_per_s']:,.0f} tasks/s"
        )
        Path(s.args.chart).write_text(latency_svg(ours["loads"], title))
        print(f"{'open loop chart':<22} {s.args.chart}", flush=True)


def run_clients(s: Session) -> None:
    ours = clients_workload(200_000 // s.scale, 5000 // s.scale)
    for name in ("blocking", *CLIENT_LOOPS):
        if name not in ours:
            continue  # uvloop, not installed
        rate, trip = ours[f"{name}_submits_per_s"], ours[name]
        s.emit(
            f"client {name}",
            f"{rate:,.0f} submits/s (median of {ours['rounds']}), round trip p50"
            f" {trip['p50_us']:,.0f} p99 {trip['p99_us']:,.0f} µs; client CPU"
            f" {trip['cpu_us_per_submit']:.1f} µs a submit ({trip['cpu_us_per_submit'] / 3:.2f}"
            f" of the goal 3 µs), {trip['cpu_us_per_trip']:.0f} µs a round trip",
            {"client": name, "submits_per_s": rate, "rounds": ours[f"{name}_rounds"], **trip},
        )


def run_fanin(s: Session) -> None:
    ours = fanin_workload(50, 2000 // s.scale)
    s.emit("fan-in", f"{ours['tasks_per_s']:,.0f} tasks/s", ours)


def run_sweep(s: Session) -> None:
    for size, n in ((16, 200_000), (1024, 100_000), (65536, 20_000)):
        ours = e2e_workload(n // s.scale, size)
        # beanstalkd refuses jobs over 65,535 bytes by default.
        theirs = s.peer("e2e", n // s.scale, size) if size < 65536 else None
        s.emit_e2e(f"e2e {size} B", ours, theirs)


def run_memory(s: Session) -> None:
    ours = memory_workload(500_000 // s.scale)
    s.emit(
        "memory",
        f"RSS {ours['rss_empty'] / 2**20:.1f} MiB empty, {ours['rss_full'] / 2**20:.1f} MiB"
        f" with {ours['n']:,} tasks: {ours['bytes_per_task']:.0f} B/task,"
        f" {ours['bytes_per_task_beyond_pool']:.0f} B/task beyond the pool",
        ours,
    )


def run_hotpath(s: Session) -> None:
    # Issue 35's targets 1, 6 and 7 in two lines: the daemon's CPU per task
    # for version 1, version 2 plain and each feature (alternated, medians),
    # and the memory per queued task beyond its PMAD block, counted exactly.
    rounds, n = 3, 100_000 // s.scale
    features = v2_features_workload(n, rounds)
    rate, cpu = features["median"], features["median_daemon_us"]
    s.emit(
        "hotpath cpu",
        "daemon µs/task "
        + ", ".join(f"{n[3:] or n}: {cpu[n]:.2f}" for n in V2_FEATURES)
        + f" (median of {rounds}, alternated); tasks/s ratio to v1: "
        + ", ".join(f"{n[3:] or 'plain'} {rate[n] / rate['v1']:.2f}" for n in V2_FEATURES[1:]),
        {"workload_runs": "v2", **features},
    )
    memory = {p: task_memory_workload(200_000 // s.scale, p) for p in (1, 2)}
    parts = memory[1]["parts"]
    s.emit(
        "hotpath memory",
        f"per queued task beyond its PMAD block: v1 {memory[1]['bytes_per_task']:.0f} B,"
        f" v2 {memory[2]['bytes_per_task']:.0f} B (tracemalloc, {memory[1]['n']:,} tasks): "
        + ", ".join(f"{k} {v}" for k, v in parts.items())
        + f", live-task table, FIFO slot and rounding {memory[1]['rest']:.0f}",
        {"v1": memory[1], "v2": memory[2]},
    )


def run_monitor(s: Session) -> None:
    ours = monitor_workload(40_000 // s.scale, 300)
    s.emit(
        "monitor",
        f"{ours['queries']} pipelined INSPECTs, {ours['depth']:,} tasks ahead:"
        f" {ours['seconds'] * 1000:,.1f} ms ({ours['ms_per_inspect']:.3f} ms each);"
        f" round trips on another queue meanwhile: {ours['round_trips']},"
        f" the longest {ours['round_trip_max_ms']:,.1f} ms",
        ours,
    )


def run_journal(s: Session) -> None:
    ours = journal_workload(100_000 // s.scale, s.journal_dir)
    rates, ratios = ours["tasks_per_s"], ours["ratio"]
    s.emit(
        "journal e2e",
        "  ".join(f"{k} {rates[k]:,.0f}/s ({ratios[k]:.2f})" for k in rates),
        ours,
    )
    # Issue 35's target 4: fsync = always against fsync = no, alternated.
    ours = fsync_workload(100_000 // s.scale, s.journal_dir)
    s.emit(
        "journal always/no",
        f"always {ours['median']['always']:,.0f}/s, no {ours['median']['no']:,.0f}/s"
        f" (median of {ours['rounds']}, alternated): ratio {ours['ratio']:.2f}"
        " (goal >= 0.85)",
        ours,
    )


def run_harness(s: Session) -> None:
    # The harness's own workloads and rules (one job per put, no
    # pipelining), Quicx and beanstalkd interleaved.
    if not s.peers:
        print("harness                (skipped: no peer harness)", flush=True)
        return
    if not QUICX_ADAPTER.exists():
        raise SystemExit(f"tools.bench: run from the repository root ({QUICX_ADAPTER})")
    for workload, n in (("enqueue", 20_000), ("e2e", 20_000), ("latency", 2_000)):
        ours = peer_run(s.peers, s.python, "quicx", workload, n // s.scale)
        theirs = peer_run(s.peers, s.python, "beanstalkd", workload, n // s.scale)
        key = "p50_us" if workload == "latency" else "jobs_per_s"
        if key not in ours or key not in theirs:
            s.emit(f"harness {workload}", "failed", {"quicx": ours, "peer": theirs})
            continue
        s.emit(
            f"harness {workload}",
            f"quicx {ours[key]:,.0f}  beanstalkd {theirs[key]:,.0f}"
            f"  ({'µs p50' if workload == 'latency' else 'jobs/s'}),"
            f" ratio {ours[key] / theirs[key]:.2f}x",
            {"quicx": ours, "peer": theirs},
        )


def run_events(s: Session) -> None:
    ours = events_workload(100_000 // s.scale, s.journal_dir)
    s.emit(
        "events e2e",
        f"off {ours['median_off']:,.0f}/s  on {ours['median_on']:,.0f}/s"
        f"  (median of 3 each, alternated): ratio {ours['ratio']:.2f}",
        ours,
    )


def run_observability(s: Session) -> None:
    ours = observability_workload(100_000 // s.scale)
    s.emit(
        "observability e2e",
        f"off {ours['median_off']:,.0f}/s  on {ours['median_on']:,.0f}/s"
        f"  (median of 3 each, alternated; {ours['scrapes']} scrapes, the longest"
        f" {ours['scrape_ms_max']:.1f} ms; {ours['stream_updates']} dashboard updates):"
        f" ratio {ours['ratio']:.2f}; daemon CPU per task"
        f" {ours['daemon_cpu_us_per_task']['off']:.2f} µs off,"
        f" {ours['daemon_cpu_us_per_task']['on']:.2f} µs on",
        ours,
    )


def run_report(s: Session) -> None:
    ours = report_workload(1_000_000 // s.scale)
    s.emit(
        "report",
        f"{ours['events']:,} events in {ours['seconds']:.1f} s"
        f" ({ours['events_per_s']:,.0f} events/s, JVM start-up included)",
        ours,
    )


def run_delays(s: Session) -> None:
    ours = delays_idle_workload(20)
    late = ours["lateness_ms"]
    s.emit(
        "delays idle",
        f"{ours['k']} tasks one at a time, each due {ours['delay_ms']} ms after its SUBMIT:"
        f" lateness p50 {late['p50']:.2f} ms, max {late['max']:.2f} ms",
        ours,
    )
    n = 100_000 // s.scale if s.args.delays_dispatch is None else s.args.delays_dispatch
    ours = delays_dispatch_workload(n)
    late, rtt = ours["lateness_ms"], ours["stats_rtt_ms"]
    before = "-" if rtt["max_before"] is None else f"{rtt['max_before']:.1f}"
    s.emit(
        "delays dispatch",
        f"{n:,} tasks due at once, lateness p0 {late['p0']:.1f} p50 {late['p50']:.1f}"
        f" p99 {late['p99']:.1f} p100 {late['p100']:.1f} ms ({ours['tasks_per_s']:,.0f}"
        f" tasks/s); STATS every {PROBE_INTERVAL * 1000:.0f} ms: max {rtt['max']:.1f} ms"
        f" meanwhile, {before} before",
        ours,
    )
    m = 1_000_000 // s.scale if s.args.delays_memory is None else s.args.delays_memory
    ours = delays_memory_workload(m)
    s.emit(
        "delays memory",
        f"{ours['m']:,} tasks: queued {ours['queued']['bytes_per_task']:.0f} B/task,"
        f" delayed {ours['delayed']['bytes_per_task']:.0f} B/task:"
        f" {ours['delay_bytes_per_task']:.0f} B/task for the delay",
        ours,
    )


def run_results(s: Session) -> None:
    # Side by side, alternated: version-2 end to end without a result,
    # and with a 1 KiB result returned to the producer with each DONE.
    rounds, n = 3, 100_000 // s.scale
    runs: dict[int, list[dict[str, Any]]] = {0: [], RESULT_SIZE: []}
    for _ in range(rounds):
        for size in runs:
            runs[size].append(e2e_workload(n, protocol=2, result_size=size))
    rate = {size: statistics.median(r["tasks_per_s"] for r in runs[size]) for size in runs}
    daemon_us = {
        size: statistics.median(r["cpu_us_per_task"]["daemon"] for r in runs[size]) for size in runs
    }
    s.emit(
        "results",
        f"v2 e2e without a result {rate[0]:,.0f}/s, with 1 KiB results"
        f" {rate[RESULT_SIZE]:,.0f}/s (median of {rounds}, alternated):"
        f" ratio {rate[RESULT_SIZE] / rate[0]:.2f}; daemon {daemon_us[0]:.1f} vs"
        f" {daemon_us[RESULT_SIZE]:.1f} µs/task",
        {"n": n, "rounds": rounds, "without": runs[0], "with_1k": runs[RESULT_SIZE]},
    )


def run_scale(s: Session) -> None:
    # Side by side, alternated: 1, 2 and 4 daemons, each producer and
    # worker given one daemon's address (independent) or all of them
    # (cluster); with 1 daemon both are the same run.
    ours = scale_workload(50_000 // s.scale)
    rates, per, cpu = ours["median"], ours["median_per_daemon"], ours["median_daemon_us"]
    most = SCALE_DAEMONS[-1]

    def figures(mode: str, count: int) -> str:
        return (
            f"{rates[mode][count]:,.0f}/s ({per[mode][count]:,.0f}/s each,"
            f" {cpu[mode][count]:.1f} µs/task)"
        )

    s.emit(
        "scale e2e",
        "  ".join(
            f"{count} daemon: {figures(INDEPENDENT, count)}"
            if count == 1
            else f"{count} daemons: "
            + ", ".join(f"{mode} {figures(mode, count)}" for mode in SCALE_MODES)
            for count in SCALE_DAEMONS
        )
        + f"  (median of {ours['rounds']}, alternated): with {most}, "
        + ", ".join(f"{mode} x{rates[mode][most] / rates[mode][1]:.2f}" for mode in SCALE_MODES),
        ours,
    )


def run_abuse(s: Session) -> None:
    for result in abuse_workload(s.args.quick):
        s.emit(f"abuse {result['scenario']}", abuse_line(result), result)


def run_starvation(s: Session) -> None:
    # W = 1 s, a low task every 1.5 s (the trickle the bound is stated for);
    # then aging off, where the low tasks start only once the top stops.
    seconds = 30.0 / s.scale
    for aging in (1.0, 0.0):
        ours = starvation_workload(aging, seconds, 1.5)
        s.emit(
            f"starvation aging {aging:g}",
            f"{ours['low_tasks']} lowest-priority tasks beside {ours['top_tasks']:,}"
            f" saturating top ones: wait p50 {ours['wait_p50_s']:.3f} s,"
            f" p99 {ours['wait_p99_s']:.3f} s, max {ours['wait_max_s']:.3f} s;"
            f" {ours['promoted']} promoted",
            ours,
        )


def run_dependencies(s: Session) -> None:
    edges = edges_workload(20_000 // s.scale, 50_000 // s.scale)
    s.emit(
        "dependency edges",
        f"{edges['edges_per_s']:,.0f} edges resolved/s ({edges['edges']:,} edges,"
        f" {edges['children']:,} children of 32 parents each; with the tasks' own run:"
        f" {edges['edges_per_s_all_in']:,.0f}/s)",
        edges,
    )
    for members in FANIN_SIZES:
        cost = fanin_cost_workload(members // s.scale)
        s.emit(
            f"fan-in {members // s.scale:,}",
            f"{cost['us_in_dependencies_per_member']:.2f} µs in the dependencies per member"
            f" outcome; a member {cost['us_per_member_with_callback']:.1f} µs with the"
            f" callback, {cost['us_per_member_plain']:.1f} µs without",
            cost,
        )


RUNS: dict[str, Callable[[Session], None]] = {
    "submit": run_submit,
    "e2e": run_e2e,
    "v2": run_v2,
    "latency": run_latency,
    "roundtrip": run_roundtrip,
    "openloop": run_openloop,
    "clients": run_clients,
    "fanin": run_fanin,
    "sweep": run_sweep,
    "memory": run_memory,
    "hotpath": run_hotpath,
    "monitor": run_monitor,
    "harness": run_harness,
    "journal": run_journal,
    "events": run_events,
    "observability": run_observability,
    "report": run_report,
    "delays": run_delays,
    "results": run_results,
    "idle": run_idle,
    "scale": run_scale,
    "abuse": run_abuse,
    "starvation": run_starvation,
    "dependencies": run_dependencies,
}
"""The workloads by name, in the order C{python -m tools.bench} runs them."""

WORKLOADS = tuple(RUNS)
