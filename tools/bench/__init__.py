"""
The benchmark: C{python -m tools.bench}.  Not part of the test run.

Every workload starts a fresh daemon (C{twistd -n quicx}) on a loopback port,
with worker processes running C{quicx worker} on a no-op handler, and stops
every process it started.  Each prints a line of figures and a JSON line.
With C{--peers}, the same run also drives the peer harness in
C{../shared/bench/peers} (beanstalkd) and prints Quicx / peer ratios.

    python -m tools.bench                      # everything, with peers
    python -m tools.bench e2e latency --quick  # a subset, smaller N
    python -m tools.bench journal              # e2e per journal fsync policy
    python -m tools.bench delays               # delayed tasks: dispatch spread, memory
    python -m tools.bench observability        # e2e with /metrics off and on, scraped
    python -m tools.bench scale                # 1, 2, 4 daemons: independent, as a cluster
    python -m tools.bench abuse                # the memory bound under abuse (tools/abuse.py)
    python -m tools.bench starvation           # lowest-priority waits beside a saturating top
    python -m tools.bench dependencies         # edges resolved per second; a chord's fan-in cost
    python -m tools.bench openloop             # latency at 25/50/75 % of the maximum, a chart
    python -m tools.bench roundtrip            # round trip p50 / beanstalkd's / the awake floor
    python -m tools.bench hotpath              # daemon CPU per task, v1, v2, each feature; memory

See docs/performance.md for the figures and how to read them.

The package: L{rig} (what every workload runs on: the daemon, its workers,
payloads), the workloads by what they measure (L{throughput}, L{scale},
L{delays}, L{observability}, L{report}, L{openloop} and its L{chart}),
L{peers} (the peer harness), L{runs} (each workload as the command runs and
prints it) and L{cli} (the command).  Every name is here too: C{from tools import bench;
bench.e2e_workload(...)}, and workers run C{tools.bench:noop_worker}.
"""

from tools.bench.chart import latency_svg
from tools.bench.cli import HELPERS, main
from tools.bench.delays import (
    DAY,
    DELAY_CREDITS,
    DELAY_WORKERS,
    IDLE_DELAY_MS,
    PROBE_INTERVAL,
    delays_dispatch_workload,
    delays_idle_workload,
    delays_memory_workload,
    delays_worker,
    probe,
)
from tools.bench.dependencies import (
    FANIN_SIZES,
    PARENTS_PER_CHILD,
    edges_workload,
    fanin_cost_workload,
)
from tools.bench.memory import task_memory_workload
from tools.bench.observability import (
    BENCH_TOKEN,
    OBSERVABILITY_ON,
    SCRAPE_INTERVAL,
    V2_FEATURES,
    Scraper,
    Watcher,
    monitor_workload,
    observability_workload,
    v2_features_workload,
)
from tools.bench.openloop import LOADS, openloop_producer, openloop_workload, pin
from tools.bench.peers import QUICX_ADAPTER, find_peers, peer_python, peer_run
from tools.bench.report import report_workload, synthetic_events
from tools.bench.rig import (
    BENCH_CONFIG,
    BENCH_TYPE,
    BUSY_POLL,
    CREDITS,
    ONE_TASK_EACH,
    RESULT_1K,
    RESULT_SIZE,
    RESULT_WORKERS,
    SMALL_RESULT_SIZE,
    STOCK,
    V2_DELAYED,
    V2_EXPIRING,
    V2_OPTIONS,
    V2_PRIORITIES,
    V2_QUEUES,
    Layout,
    Workers,
    alike,
    kibibyte,
    noop,
    noop_worker,
    payload_of,
    percentiles,
    plain_noop,
    quantile,
    result_worker,
    rss_growth,
    running,
    sixteen_bytes,
    small_result_worker,
    status,
    tasks_of,
    wait_for_workers,
)
from tools.bench.runs import RUNS, WORKLOADS, Session, emit
from tools.bench.scale import (
    CLUSTER,
    INDEPENDENT,
    SCALE_DAEMONS,
    SCALE_MODES,
    SCALE_WORKERS,
    client_addresses,
    line_of,
    scale_producer,
    scale_run,
    scale_workload,
)
from tools.bench.starvation import starvation_worker, starvation_workload
from tools.bench.throughput import (
    e2e_workload,
    events_workload,
    fanin_producer,
    fanin_workload,
    fsync_workload,
    idle_workload,
    journal_workload,
    latency_workload,
    memory_workload,
    submit_workload,
)

__all__ = [
    "BENCH_CONFIG",
    "BENCH_TOKEN",
    "BENCH_TYPE",
    "BUSY_POLL",
    "CLUSTER",
    "CREDITS",
    "DAY",
    "DELAY_CREDITS",
    "DELAY_WORKERS",
    "FANIN_SIZES",
    "HELPERS",
    "IDLE_DELAY_MS",
    "INDEPENDENT",
    "LOADS",
    "OBSERVABILITY_ON",
    "ONE_TASK_EACH",
    "PARENTS_PER_CHILD",
    "PROBE_INTERVAL",
    "QUICX_ADAPTER",
    "RESULT_1K",
    "RESULT_SIZE",
    "RESULT_WORKERS",
    "RUNS",
    "SCALE_DAEMONS",
    "SCALE_MODES",
    "SCALE_WORKERS",
    "SCRAPE_INTERVAL",
    "SMALL_RESULT_SIZE",
    "STOCK",
    "V2_DELAYED",
    "V2_EXPIRING",
    "V2_FEATURES",
    "V2_OPTIONS",
    "V2_PRIORITIES",
    "V2_QUEUES",
    "WORKLOADS",
    "Layout",
    "Scraper",
    "Session",
    "Watcher",
    "Workers",
    "alike",
    "client_addresses",
    "delays_dispatch_workload",
    "delays_idle_workload",
    "delays_memory_workload",
    "delays_worker",
    "e2e_workload",
    "edges_workload",
    "emit",
    "events_workload",
    "fanin_cost_workload",
    "fanin_producer",
    "fanin_workload",
    "find_peers",
    "fsync_workload",
    "idle_workload",
    "journal_workload",
    "kibibyte",
    "latency_svg",
    "latency_workload",
    "line_of",
    "main",
    "memory_workload",
    "monitor_workload",
    "noop",
    "noop_worker",
    "observability_workload",
    "openloop_producer",
    "openloop_workload",
    "payload_of",
    "peer_python",
    "peer_run",
    "percentiles",
    "pin",
    "plain_noop",
    "probe",
    "quantile",
    "report_workload",
    "result_worker",
    "rss_growth",
    "running",
    "scale_producer",
    "scale_run",
    "scale_workload",
    "sixteen_bytes",
    "small_result_worker",
    "starvation_worker",
    "starvation_workload",
    "status",
    "submit_workload",
    "synthetic_events",
    "task_memory_workload",
    "tasks_of",
    "v2_features_workload",
    "wait_for_workers",
]
