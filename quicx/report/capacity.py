"""
The capacity what-if as a Spark job (C{quicx report --what-if workers=1,2,4}).

The events are split into histories: one per daemon run (the pid in the
file name) and group of queues that share workers (the queues a recorded
worker took tasks from, joined through the workers that took from several).
Each history is read into a L{quicx.report.whatif.Workload} once, then
replayed once per worker count, as one Spark task per (history, worker
count): the work grows with the history and spreads over the executors,
though one history's replay runs in one task (a queue's state depends on
all its past).  A queue no recorded worker served is left out.

Written to C{--out}:

  - C{whatif/}: per scenario (C{recorded}: measured; C{simulated}: the
    model), number of workers and queue (C{*}: all), the tasks that ran,
    their queue wait at p50 / p95 / p99 (ms) and the most tasks queued;
  - C{whatif_backlog/}: per scenario, workers, queue and time bucket (C{t},
    epoch ms of its start), the most tasks queued.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from attrs import frozen

from quicx.report.page import CHAR_PX, PERCENTILES, html_table, nice_step
from quicx.report.whatif import Row, Workload, rows, workload

BUCKETS = 120
"""Time buckets over the recording, for the backlog over time."""
KINDS = (
    "submitted",
    "dispatched",
    "done",
    "failed",
    "retrying",
    "requeued",
    "cancelled",
    "expired",
    "moved",
)
"""The events the model reads."""
COLUMNS = ("run", "t", "event", "task", "worker", "attempt", "queue", "priority", "cause")
ROW_SCHEMA = "scenario STRING, workers LONG, queue STRING, kind STRING, t LONG, value LONG"
CHARTS = 4
"""Backlog charts at most: all queues, then the busiest."""


@frozen
class WhatIf:
    """
    The what-if's results, collected to the driver (they are small).

    @ivar table: the C{whatif/} rows; C{backlog}: the C{whatif_backlog/} rows.
    """

    table: list[dict[str, Any]]
    backlog: list[dict[str, Any]]
    origin: int
    bucket_ms: int


def queue_groups(served: Iterable[tuple[str, int, str]]) -> dict[tuple[str, str], str]:
    """
    The group of each (run, queue) of C{served}, (run, worker, queue)
    triples: queues one worker took tasks from share a group, named after
    its first queue.
    """
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(node: tuple[str, str]) -> tuple[str, str]:
        while parent[node] != node:
            parent[node] = node = parent[parent[node]]
        return node

    first_of_worker: dict[tuple[str, int], tuple[str, str]] = {}
    for run, worker, queue in served:
        node = (run, queue)
        parent.setdefault(node, node)
        other = first_of_worker.setdefault((run, worker), node)
        a, b = root(node), root(other)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {node: root(node)[1] for node in parent}


def _history(
    record: Any, groups: dict[tuple[str, str], str]
) -> tuple[tuple[str, str] | None, dict[str, Any]]:
    fields = record.asDict()
    group = groups.get((fields["run"], fields["queue"]))
    return (None if group is None else (fields["run"], group)), fields


def _replay(
    item: tuple[tuple[int | None, Any], Workload], origin: int, bucket_ms: int
) -> Iterator[Row]:
    (slots, _), work = item
    return rows(work, slots, origin, bucket_ms)


def what_if(spark: Any, events: Any, workers: tuple[int, ...], out: str | None) -> WhatIf:
    """
    Replay the workload of C{events} (the report's frame) for each count of
    C{workers}; write the tables to C{out}.
    """
    from pyspark.sql import functions as F

    served = (
        events.where("event = 'dispatched' AND worker IS NOT NULL")
        .select("run", "worker", "queue")
        .distinct()
        .collect()
    )
    groups = queue_groups((row["run"], row["worker"], row["queue"]) for row in served)
    tasks = events.where(F.col("task").isNotNull() & F.col("event").isin(*KINDS))
    first, last = tasks.agg(F.min("t"), F.max("t")).first()
    origin = first or 0
    bucket_ms = max(1, math.ceil(((last or 0) - origin + 1) / BUCKETS))
    lookup = spark.sparkContext.broadcast(groups)
    histories = (
        tasks.select(*COLUMNS)
        .rdd.map(lambda record: _history(record, lookup.value))
        .filter(lambda keyed: keyed[0] is not None)
        .groupByKey()
        .mapValues(workload)
    )
    scenarios = (None, *workers)  # None: the recording itself
    count = len(scenarios) * max(1, len({group for group in groups.values()}))
    flat = (
        histories.flatMap(lambda item: [((slots, item[0]), item[1]) for slots in scenarios])
        .partitionBy(min(count, 4 * spark.sparkContext.defaultParallelism))
        .flatMap(lambda item: _replay(item, origin, bucket_ms))
    )
    frame = spark.createDataFrame(flat, ROW_SCHEMA).cache()
    pct = "array(" + ", ".join(str(p) for p in PERCENTILES) + ")"
    keys = ["scenario", "workers"]
    waits = frame.where("kind = 'wait'")
    latency = [F.count("*").alias("tasks"), F.expr(f"percentile(value, {pct})").alias("p")]
    wait_table = (
        waits.groupBy(*keys, "queue")
        .agg(*latency)
        .unionByName(waits.groupBy(*keys).agg(*latency).withColumn("queue", F.lit("*")))
    )
    per_queue = (
        frame.where("kind = 'backlog'")
        .groupBy(*keys, "queue", "t")
        .agg(F.sum("value").alias("backlog"))
    )
    backlog = per_queue.unionByName(
        per_queue.groupBy(*keys, "t")
        .agg(F.sum("backlog").alias("backlog"))
        .withColumn("queue", F.lit("*"))
    ).withColumn("t", F.col("t") * bucket_ms + origin)
    most = backlog.groupBy(*keys, "queue").agg(F.max("backlog").alias("max_backlog"))
    table = wait_table.join(most, [*keys, "queue"], "left").fillna(0, subset=["max_backlog"])
    for index, p in enumerate(PERCENTILES):
        table = table.withColumn(f"wait_p{round(p * 100)}_ms", F.col("p")[index])
    table = table.select(
        "queue",
        "workers",
        "scenario",
        "tasks",
        "wait_p50_ms",
        "wait_p95_ms",
        "wait_p99_ms",
        "max_backlog",
    ).orderBy("queue", "workers", "scenario")
    backlog = backlog.select(*keys, "queue", "t", "backlog").orderBy(*keys, "queue", "t")
    if out is not None:
        for name, table_frame in (("whatif", table), ("whatif_backlog", backlog)):
            table_frame.write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}")
    result = WhatIf(
        [row.asDict() for row in table.collect()],
        [row.asDict() for row in backlog.collect()],
        origin,
        bucket_ms,
    )
    frame.unpersist()
    return result


# -- the page ------------------------------------------------------------------------

COLOURS = ("#1f6f8b", "#d95f02", "#7570b3", "#1b9e77", "#e7298a", "#66a61e", "#a6761d")


def render(result: WhatIf) -> str:
    """The page's what-if section: the table, and the backlog over time."""
    tasks: dict[str, int] = defaultdict(int)
    for row in result.table:
        if row["scenario"] == "recorded":
            tasks[row["queue"]] += row["tasks"]
    busiest = sorted((q for q in tasks if q != "*"), key=lambda q: (-tasks[q], q))
    charts = [
        _backlog_chart(result, queue)
        for queue in ["*", *busiest][: CHARTS if len(busiest) > 1 else 1]
    ]
    return "\n".join(
        [
            "<h2>Capacity what-if</h2>",
            "<p class='note'>The recorded workload replayed through a model of the daemon's"
            " dispatch with other numbers of workers (each one task at a time); recorded: as"
            " measured. Queue wait: first dispatch &minus; ready (submit, or due time), ms."
            " See docs/pipeline.md for what the model keeps and leaves out.</p>",
            html_table(result.table),
            "<div class='row'>",
            *charts,
            "</div>",
        ]
    )


def _backlog_chart(result: WhatIf, queue: str) -> str:
    """Tasks queued over time in C{queue}, a line per scenario."""
    series: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
    for row in result.table:
        if row["queue"] == queue:
            series[row["scenario"], row["workers"]] = {}
    for row in result.backlog:
        if row["queue"] == queue:
            series[row["scenario"], row["workers"]][row["t"]] = row["backlog"]
    title = "Tasks queued, all queues" if queue == "*" else f"Tasks queued in {queue}"
    times = [t for points in series.values() for t in points]
    if not times:
        return f"<p>{html.escape(title)}: none queued in any scenario.</p>"
    bucket_ms, start, end = result.bucket_ms, result.origin, max(times) + result.bucket_ms
    top_value = max(max(points.values(), default=0) for points in series.values())
    step = nice_step(top_value)
    top = step * math.ceil(max(top_value, 1) / step)
    width = 560
    left = 14 + CHAR_PX * len(f"{top:,}")
    right, upper = 16, 34
    legend = _legend(sorted(series), left, width - right)
    lower = 54 + LEGEND_ROW * (1 + max(row for row, _, _ in legend))
    height = 210 + lower
    plot_w, plot_h = width - left - right, height - upper - lower
    bottom = upper + plot_h

    def x_of(t: float) -> float:
        return left + (t - start) / max(end - start, 1) * plot_w

    def y_of(value: float) -> float:
        return bottom - value / top * plot_h

    parts = [
        f"<svg viewBox='0 0 {width} {height}' width='{width}' height='{height}' role='img'"
        f" aria-label='{html.escape(title, quote=True)}'>",
        "<text class='axis-title' x='4' y='16'>tasks queued</text>",
    ]
    for value in range(0, top + 1, step):
        y = y_of(value)
        parts.append(
            f"<line class='grid' x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}'/>"
            f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end'>{value:,}</text>"
        )
    seconds = (end - start) / 1000
    tick = nice_step(max(1, math.ceil(seconds)), ticks=5)
    for s in range(0, math.floor(seconds) + 1, tick):
        x = x_of(start + s * 1000)
        parts.append(
            f"<line class='axis' x1='{x:.1f}' x2='{x:.1f}' y1='{bottom}' y2='{bottom + 4}'/>"
            f"<text x='{x:.1f}' y='{bottom + 18}' text-anchor='middle'>{s:,}</text>"
        )
    parts.append(
        f"<line class='axis' x1='{left}' x2='{width - right}' y1='{bottom}' y2='{bottom}'/>"
    )
    for n, ((scenario, _), points) in enumerate(sorted(series.items())):
        colour = COLOURS[n % len(COLOURS)]
        dash = " stroke-dasharray='5 3'" if scenario == "recorded" else ""
        line, x, label = legend[n]
        y = bottom + 58 + line * LEGEND_ROW
        parts.append(
            f"<polyline fill='none' stroke='{colour}' stroke-width='1.5'{dash}"
            f" points='{_steps(points, start, end, bucket_ms, x_of, y_of)}'>"
            f"<title>{html.escape(label)}</title></polyline>"
            f"<line x1='{x:.1f}' x2='{x + 16:.1f}' y1='{y - 4}' y2='{y - 4}'"
            f" stroke='{colour}' stroke-width='2'{dash}/>"
            f"<text class='legend' x='{x + 20:.1f}' y='{y}'>{html.escape(label)}</text>"
        )
    parts.append(
        f"<text class='axis-title' x='{left + plot_w / 2:.1f}' y='{bottom + 36}'"
        " text-anchor='middle'>seconds from the first event</text></svg>"
    )
    return f"<figure><figcaption>{html.escape(title)}</figcaption>{''.join(parts)}</figure>"


LEGEND_ROW = 16
"""The height of a row of the backlog chart's legend, px."""


def _legend(
    series: list[tuple[str, int]], left: float, right: float
) -> list[tuple[int, float, str]]:
    """
    Each series' legend entry: (row, x, label), the entries in rows that
    end before C{right}, a new row where the next would not.
    """
    entries: list[tuple[int, float, str]] = []
    row, x = 0, left
    for scenario, workers in series:
        label = f"{workers} recorded" if scenario == "recorded" else f"{workers} workers"
        wide = 20 + CHAR_PX * len(label)
        if x + wide > right and x > left:
            row, x = row + 1, left
        entries.append((row, x, label))
        x += wide + 8
    return entries


def _steps(
    points: dict[int, int], start: int, end: int, bucket_ms: int, x_of: Any, y_of: Any
) -> str:
    """A polyline's points: each bucket's value as a step, 0 where none is listed."""
    out = []
    for t in range(start, end, bucket_ms):
        y = y_of(points.get(t, 0))
        out.append(f"{x_of(t):.1f},{y:.1f} {x_of(t + bucket_ms):.1f},{y:.1f}")
    return " ".join(out)
