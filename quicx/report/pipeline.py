"""
The lifecycle-event report: a PySpark job over the daemon's event files.

    quicx report /var/lib/quicx/events --out report/          # local[*]
    quicx report s3a://bucket/events/ --out report/ --master spark://m:7077
    JOB=$(python -c 'import quicx.report.job as j; print(j.__file__)')
    spark-submit --master yarn "$JOB" hdfs:///quicx/events --out hdfs:///quicx/report

It reads the NDJSON files (any path or URI Spark reads; compressed ones too,
C{.gz}), of every events schema version up to L{EVENTS_SCHEMA}, and writes
to C{--out}:

  - C{summary/}: per task type and overall (type C{*}), the counts
    (submitted, completed, failed, given up, requeued, rejected, dropped,
    never completed; each defined in docs/pipeline.md, requeued and given up
    as C{quicx status} counts them), queue wait (first dispatch - submit) and
    run time (outcome - its dispatch) at p50 / p95 / p99 / max, in
    milliseconds;
  - C{throughput/}: per minute and type, tasks submitted, completed, failed;
  - C{failures/}: the most frequent failure reasons per type, normalised
    (L{normalise_reason}: numbers, addresses, ids become placeholders), each
    with a count and one reason as written;
  - C{workers/}: per worker connection, tasks finished and busy time;
  - C{queues/}: per queue and priority, tasks submitted, completed, failed,
    cancelled and never completed, and queue wait at p50 / p95;
  - C{never_completed/}: tasks submitted and never done, failed or
    cancelled;
  - C{report.html}: all of it in one self-contained page, with charts;
  - with C{--what-if workers=...}: C{whatif/} and C{whatif_backlog/}, the
    capacity what-if (L{quicx.report.capacity}).

Tables are Parquet.  Task ids restart when a daemon without a journal
restarts, so a task is identified by the daemon's pid (from the file name)
and its id.  Percentiles are exact (linear interpolation between ranks).
Files of the release before protocol version 2 have no C{queue} or
C{priority}: their tasks count as queue C{default}, priority 0 (where a
version-1 SUBMIT goes, on a daemon with no C{[queues]} settings).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

from attrs import frozen

from quicx.protocol.monitor import EVENTS_SCHEMA
from quicx.report import whatif
from quicx.report.page import CHAR_PX, PERCENTILES, html_table, nice_step

EVENT_SCHEMA = (
    "v LONG, t LONG, event STRING, task LONG, type STRING, size LONG, producer LONG,"
    " worker LONG, attempt LONG, reason STRING, cause STRING, code LONG,"
    " queue STRING, priority LONG"
)
"""The fields the report reads, of every schema version up to L{EVENTS_SCHEMA}."""
QUEUE_COUNTS = ("submitted", "completed", "failed", "cancelled", "never_completed")
"""The per-queue table's counts (see docs/pipeline.md)."""
TOP_REASONS = 10
COUNTS = (
    "submitted",
    "completed",
    "failed",
    "given_up",
    "requeued",
    "retried",
    "dead",
    "rejected",
    "dropped",
    "never_completed",
)
"""The summary's counts, in order (each defined once, in docs/pipeline.md)."""

REASON_PATTERNS: tuple[tuple[str, str], ...] = (
    # uuids, then addresses with their ports, then hex, then any other number
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<id>"),
    (r"\[[0-9a-fA-F:.]*\](:[0-9]+)?", "<address>"),
    (r"\b[0-9]{1,3}(\.[0-9]{1,3}){3}(:[0-9]+)?\b", "<address>"),
    (r"\b0[xX][0-9a-fA-F]+\b", "<hex>"),
    (r"\b[0-9a-fA-F]{16,}\b", "<hex>"),
    (r"\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b", "<hex>"),
    (r"[0-9]+(\.[0-9]+)?", "<n>"),
)
"""
(pattern, placeholder) applied in order to failure reasons, so that one cause
is one row: C{worker 127.0.0.1:50321 disconnected} and C{worker
127.0.0.1:50877 disconnected} are both C{worker <address> disconnected}.
Written for both Java's and Python's regular expressions.
"""


def normalise_reason(reason: str) -> str:
    """C{reason} with its numbers, addresses, ids and hex as placeholders."""
    for pattern, placeholder in REASON_PATTERNS:
        reason = re.sub(pattern, placeholder, reason)
    return reason


@frozen
class Report:
    """The report's tables, collected to the driver (they are small)."""

    summary: list[dict[str, Any]]
    throughput: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    never_completed: int
    events: int
    wait_histogram: list[tuple[float, int]]
    run_histogram: list[tuple[float, int]]
    what_if: Any = None  # a capacity.WhatIf, with --what-if


def progress(message: str) -> None:
    print(f"quicx report: {message}", file=sys.stderr, flush=True)


def build_report(
    spark: Any, paths: list[str], out: str | None = None, what_if: tuple[int, ...] = ()
) -> Report:
    """
    Compute the report from the event files at C{paths}; write it to C{out}.
    C{what_if}: the worker counts of the capacity what-if (L{capacity}).
    """
    from pyspark.sql import functions as F

    progress(f"reading {', '.join(paths)}")
    events = (
        spark.read.schema(EVENT_SCHEMA)
        .json(paths)
        .withColumn("run", F.regexp_extract(F.input_file_name(), r"events-[0-9T]+-([0-9]+)-", 1))
        # Files of the previous release have neither: their tasks were all
        # in the one queue, at one priority.
        .withColumn("queue", F.coalesce(F.col("queue"), F.lit("default")))
        .withColumn("priority", F.coalesce(F.col("priority"), F.lit(0)))
        .cache()
    )
    count, newest = events.agg(F.count("*"), F.max("v")).first()
    if newest is not None and newest > EVENTS_SCHEMA:
        raise ValueError(
            f"events of schema version {newest} (a newer daemon's): this report reads"
            f" versions 1 to {EVENTS_SCHEMA}"
        )
    progress(f"{count:,} events")
    tasks = events.where(F.col("task").isNotNull())

    submitted = (
        tasks.where("event = 'submitted'")
        .groupBy("run", "task")
        .agg(
            F.min("t").alias("submitted_t"),
            F.first("type").alias("type"),
            F.first("queue").alias("queue"),
            F.first("priority").alias("priority"),
        )
    )
    dispatched = tasks.where("event = 'dispatched'").select(
        "run", "task", "attempt", F.col("t").alias("dispatched_t"), "worker"
    )
    first_dispatch = dispatched.groupBy("run", "task").agg(F.min("dispatched_t").alias("first_t"))
    outcomes = tasks.where("event IN ('done', 'failed')").select(
        "run", "task", "attempt", "event", "reason", "worker", F.col("t").alias("outcome_t"), "type"
    )
    # A run is an outcome a worker reported, with its dispatch (the same
    # attempt, to the same worker).  A give-up -- the daemon failing a task
    # no worker holds, after its last allowed delivery was lost or timed out
    # -- is a failed event with no worker: an outcome, not a run.
    runs = (
        outcomes.where(F.col("worker").isNotNull())
        .join(dispatched, ["run", "task", "attempt", "worker"], "inner")
        .withColumn("run_ms", F.col("outcome_t") - F.col("dispatched_t"))
    )
    gave_up = (
        outcomes.where("event = 'failed' AND worker IS NULL")
        .select("run", "task", "attempt")
        .distinct()
        .withColumn("gave_up", F.lit(True))
    )
    waits = submitted.join(first_dispatch, ["run", "task"]).withColumn(
        "wait_ms", F.col("first_t") - F.col("submitted_t")
    )

    progress("computing the summary")
    # The daemon records "requeued" before it decides to give up; like
    # `quicx status`, a requeue that ended in a give-up is counted as given
    # up, not as requeued.
    event = F.col("event")
    given_up = (event == "failed") & F.col("worker").isNull()
    requeued = (event == "requeued") & F.col("gave_up").isNull()
    counts = (
        events.join(gave_up, ["run", "task", "attempt"], "left")
        .groupBy("type")
        .agg(
            *(
                F.sum(F.when(condition, 1).otherwise(0)).alias(name)
                for condition, name in (
                    (event == "submitted", "submitted"),
                    (event == "done", "completed"),
                    (event == "failed", "failed"),
                    (given_up, "given_up"),
                    (requeued, "requeued"),
                    (event == "retrying", "retried"),
                    (event == "dead", "dead"),
                    (event == "rejected", "rejected"),
                    (event == "dropped", "dropped"),
                )
            )
        )
    )
    # Cancelled tasks never ran, and were not lost: they are not "never completed".
    finished = (
        tasks.where("event IN ('done', 'failed', 'cancelled')").select("run", "task").distinct()
    )
    never = submitted.join(finished, ["run", "task"], "left_anti")
    never_by_type = never.groupBy("type").agg(F.count("*").alias("never_completed"))
    pct = "array(" + ", ".join(str(p) for p in PERCENTILES) + ")"

    def latency(frame: Any, column: str, prefix: str) -> Any:
        return frame.groupBy("type").agg(
            F.expr(f"percentile({column}, {pct})").alias(f"{prefix}_p"),
            F.max(column).alias(f"{prefix}_max_ms"),
        )

    per_type = (
        counts.join(never_by_type, "type", "left")
        .join(latency(waits, "wait_ms", "wait"), "type", "left")
        .join(latency(runs, "run_ms", "run"), "type", "left")
    )
    overall = (
        counts.agg(*(F.sum(c).alias(c) for c in counts.columns if c != "type"))
        .crossJoin(never.agg(F.count("*").alias("never_completed")))
        .crossJoin(
            waits.agg(
                F.expr(f"percentile(wait_ms, {pct})").alias("wait_p"),
                F.max("wait_ms").alias("wait_max_ms"),
            )
        )
        .crossJoin(
            runs.agg(
                F.expr(f"percentile(run_ms, {pct})").alias("run_p"),
                F.max("run_ms").alias("run_max_ms"),
            )
        )
        .withColumn("type", F.lit("*"))
    )
    summary = per_type.unionByName(overall)
    for prefix in ("wait", "run"):
        for index, p in enumerate(PERCENTILES):
            summary = summary.withColumn(
                f"{prefix}_p{round(p * 100)}_ms", F.col(f"{prefix}_p")[index]
            )
        summary = summary.drop(f"{prefix}_p")
    columns = ["type", *COUNTS]
    for prefix in ("wait", "run"):
        columns += [f"{prefix}_p{round(p * 100)}_ms" for p in PERCENTILES]
        columns.append(f"{prefix}_max_ms")
    summary = summary.fillna(0, subset=["never_completed"]).select(columns).orderBy("type")

    progress("computing the queues")
    queue_counts = (
        tasks.where(F.col("event") != "rejected")
        .groupBy("queue", "priority")
        .agg(
            *(
                F.sum(F.when(event == kind, 1).otherwise(0)).alias(name)
                for kind, name in (
                    ("submitted", "submitted"),
                    ("done", "completed"),
                    ("failed", "failed"),
                    ("cancelled", "cancelled"),
                )
            )
        )
    )
    queue_never = never.groupBy("queue", "priority").agg(F.count("*").alias("never_completed"))
    queue_waits = waits.groupBy("queue", "priority").agg(
        F.expr(f"percentile(wait_ms, {pct})").alias("wait_p")
    )
    queues = (
        queue_counts.join(queue_never, ["queue", "priority"], "left")
        .join(queue_waits, ["queue", "priority"], "left")
        .fillna(0, subset=["never_completed"])
        .withColumn("wait_p50_ms", F.col("wait_p")[0])
        .withColumn("wait_p95_ms", F.col("wait_p")[1])
        .select("queue", "priority", *QUEUE_COUNTS, "wait_p50_ms", "wait_p95_ms")
        .orderBy("queue", F.desc("priority"))
    )

    progress("computing throughput, failures and workers")
    throughput = (
        tasks.where("event IN ('submitted', 'done', 'failed')")
        .withColumn("minute", (F.col("t") / 60000).cast("long") * 60000)
        .groupBy("minute", "type")
        .pivot("event", ["submitted", "done", "failed"])
        .count()
        .fillna(0)
        .withColumnRenamed("done", "completed")
        .orderBy("minute", "type")
    )
    normalised = F.col("reason")
    for pattern, placeholder in REASON_PATTERNS:
        normalised = F.regexp_replace(normalised, pattern, placeholder)
    failures = (
        outcomes.where("event = 'failed'")
        .withColumn("cause", normalised)
        .groupBy("type", "cause")
        .agg(F.count("*").alias("count"), F.min("reason").alias("example"))
        .withColumnRenamed("cause", "reason")
        .orderBy(F.desc("count"), "type", "reason")
        .limit(TOP_REASONS * 10)
    )
    workers = (
        runs.groupBy("run", "worker")
        .agg(F.count("*").alias("tasks"), F.sum("run_ms").alias("busy_ms"))
        .orderBy(F.desc("tasks"), "run", "worker")
    )

    if out is not None:
        progress(f"writing Parquet tables to {out}")
        for name, frame in (
            ("summary", summary),
            ("throughput", throughput),
            ("failures", failures),
            ("workers", workers),
            ("queues", queues),
            ("never_completed", never),
        ):
            frame.write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}")

    report = Report(
        summary=[row.asDict() for row in summary.collect()],
        throughput=[row.asDict() for row in throughput.collect()],
        failures=[row.asDict() for row in failures.collect()],
        workers=[row.asDict() for row in workers.collect()],
        queues=[row.asDict() for row in queues.collect()],
        never_completed=never.count(),
        events=count,
        wait_histogram=_histogram(waits, "wait_ms"),
        run_histogram=_histogram(runs, "run_ms"),
        what_if=_what_if(spark, events, what_if, out),
    )
    events.unpersist()
    return report


def _what_if(spark: Any, events: Any, workers: tuple[int, ...], out: str | None) -> Any:
    if not workers:
        return None
    from quicx.report import capacity

    progress(f"replaying the workload for {', '.join(map(str, workers))} workers")
    return capacity.what_if(spark, events, workers, out)


def _histogram(frame: Any, column: str, buckets: int = 30) -> list[tuple[float, int]]:
    """(bucket start, count) over a log scale of C{column} (milliseconds)."""
    from pyspark.sql import functions as F

    scaled = frame.select(F.log10(F.col(column).cast("double") + 1).alias("x"))
    top = scaled.agg(F.max("x")).first()[0]
    if top is None:
        return []
    width = max(top, 1e-9) / buckets
    rows = (
        scaled.select(F.least(F.floor(F.col("x") / width), F.lit(buckets - 1)).alias("b"))
        .groupBy("b")
        .count()
        .collect()
    )
    counts = {int(row["b"]): row["count"] for row in rows}
    return [(10 ** (b * width) - 1, counts.get(b, 0)) for b in range(buckets)]


# -- the page --------------------------------------------------------------------------

MAX_BARS = 90
"""Throughput bars at most: minutes are grouped when the span is longer."""


def render_html(report: Report, title: str = "Quicx task report") -> str:
    """A self-contained page: tables, and SVG charts (no scripts, no fetches)."""
    overall = next((row for row in report.summary if row["type"] == "*"), {})
    cancelled = sum(row["cancelled"] for row in report.queues)
    latency_columns = ["type"] + [
        f"{prefix}_{p}_ms" for prefix in ("wait", "run") for p in ("p50", "p95", "p99", "max")
    ]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{report.events:,} events; {overall.get('submitted', 0):,} tasks submitted,"
        f" {overall.get('completed', 0):,} completed, {overall.get('failed', 0):,} failed"
        f" ({overall.get('given_up', 0):,} of them given up),"
        f" {overall.get('requeued', 0):,} requeued, {cancelled:,} cancelled,"
        f" {report.never_completed:,} never completed.</p>",
        "<h2>Throughput</h2>",
        _throughput_chart(report.throughput),
        "<h2>Queue wait and run time</h2><div class='row'>",
        _bar_chart(
            "Tasks by queue wait",
            [(_ms(start), c) for start, c in report.wait_histogram],
            x_title="queue wait, ms (log scale)",
        ),
        _bar_chart(
            "Tasks by run time",
            [(_ms(start), c) for start, c in report.run_histogram],
            x_title="run time, ms (log scale)",
        ),
        "</div><h2>Tasks by type</h2>",
        html_table(report.summary, ["type", *COUNTS]),
        "<p class='note'>Given up: failed by the daemon after the last allowed delivery;"
        " counted in failed too. Requeued: queued again after a lost worker or a timeout,"
        " give-ups not included (as in <code>quicx status</code>).</p>",
        "<h2>Queue wait and run time by type, ms</h2>",
        html_table(report.summary, latency_columns),
        "<h2>Tasks by queue and priority</h2>",
        html_table(report.queues),
        "<p class='note'>Never completed: no done, failed or cancelled event (still queued,"
        " dropped, or lost). Queue wait: first dispatch &minus; submit. Events of the release"
        " before protocol version 2 count as queue <code>default</code>, priority 0.</p>",
        "<h2>Top failure reasons</h2>",
        html_table(report.failures),
        f"<h2>Workers ({len(report.workers):,})</h2>",
        html_table(report.workers[:25]),
        f"<p>{len(report.workers) - 25:,} more in <code>workers/</code>.</p>"
        if len(report.workers) > 25
        else "",
        _what_if_section(report),
        "</body></html>",
    ]
    return "\n".join(parts)


def _what_if_section(report: Report) -> str:
    if report.what_if is None:
        return ""
    from quicx.report import capacity

    return capacity.render(report.what_if)


_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin-bottom: 1em; max-width: 100%; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right;
         white-space: nowrap; vertical-align: top; }
td.text { text-align: left; white-space: normal; overflow-wrap: anywhere; min-width: 9em; }
th { background: #f0f0f0; }
.row { display: flex; flex-wrap: wrap; gap: 2em; }
figure { margin: 0 0 1em 0; max-width: 100%; } figcaption { font-weight: 600; }
svg { display: block; max-width: 100%; height: auto; background: #fafafa;
      border: 1px solid #ddd; font: 12px system-ui, sans-serif; }
svg .grid { stroke: #e4e4e4; } svg .axis { stroke: #888; } .note { color: #555; }
"""


def _ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == 0 else f"{value:.1f}"


def _throughput_chart(throughput: list[dict[str, Any]]) -> str:
    """Tasks completed over time, in at most L{MAX_BARS} bars of whole minutes."""
    by_minute: dict[int, int] = {}
    for row in throughput:
        by_minute[row["minute"]] = by_minute.get(row["minute"], 0) + row["completed"]
    if not by_minute:
        return "<p>Tasks completed over time: (none)</p>"
    first, last = min(by_minute), max(by_minute)
    minutes = (last - first) // 60000 + 1
    step = math.ceil(minutes / MAX_BARS)
    bars = [0] * math.ceil(minutes / step)
    for minute, count in by_minute.items():
        bars[(minute - first) // 60000 // step] += count
    days = time.gmtime(first / 1000)[:3] != time.gmtime(last / 1000)[:3]
    form = "%d %b %H:%M" if days else "%H:%M"
    labels = [
        time.strftime(form, time.gmtime(first / 1000 + i * step * 60)) for i in range(len(bars))
    ]
    per = "minute" if step == 1 else f"{step} minutes"
    return _bar_chart(
        f"Tasks completed per {per}",
        list(zip(labels, bars, strict=True)),
        x_title=f"start of each {per} (UTC)",
        width=1000,
    )


def _bar_chart(
    title: str,
    bars: list[tuple[str, int]],
    x_title: str,
    y_title: str = "tasks",
    width: int = 560,
) -> str:
    """
    Bars of (label, count) with a y axis (tasks) and as many x tick labels as
    fit without touching: each label is kept only if it clears the last one.
    """
    if not bars:
        return f"<p>{html.escape(title)}: (none)</p>"
    height = 260
    step = nice_step(max(c for _, c in bars))
    top = step * math.ceil(max(max(c for _, c in bars), 1) / step)
    y_ticks = list(range(0, top + 1, step))
    left = 14 + CHAR_PX * max(len(f"{v:,}") for v in y_ticks)
    right, upper, lower = 16, 34, 50
    plot_w, plot_h = width - left - right, height - upper - lower
    bar_w = plot_w / len(bars)
    bottom = upper + plot_h

    def y_of(value: float) -> float:
        return bottom - value / top * plot_h

    parts = [
        f"<svg viewBox='0 0 {width} {height}' width='{width}' height='{height}' role='img'"
        f" aria-label='{html.escape(title, quote=True)}'>",
        f"<text class='axis-title' x='4' y='16'>{html.escape(y_title)}</text>",
    ]
    for value in y_ticks:
        y = y_of(value)
        parts.append(
            f"<line class='grid' x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}'/>"
            f"<text class='tick y' x='{left - 6}' y='{y + 4:.1f}' text-anchor='end'>"
            f"{value:,}</text>"
        )
    for i, (label, count) in enumerate(bars):
        parts.append(
            f"<rect x='{left + i * bar_w:.1f}' y='{y_of(count):.1f}'"
            f" width='{max(bar_w - 1, 1):.1f}' height='{bottom - y_of(count):.1f}'"
            f" fill='#1f6f8b'><title>{html.escape(label)}: {count:,}</title></rect>"
        )
    parts.append(
        f"<line class='axis' x1='{left}' x2='{width - right}' y1='{bottom}' y2='{bottom}'/>"
    )
    cleared = 0.0  # the right edge of the last label kept
    for i, (label, _) in enumerate(bars):
        half = CHAR_PX * len(label) / 2
        centre = min(max(left + (i + 0.5) * bar_w, left + half), width - half - 2)
        if centre - half < cleared + 12:
            continue
        cleared = centre + half
        parts.append(
            f"<line class='axis' x1='{left + (i + 0.5) * bar_w:.1f}'"
            f" x2='{left + (i + 0.5) * bar_w:.1f}' y1='{bottom}' y2='{bottom + 4}'/>"
            f"<text class='tick x' x='{centre:.1f}' y='{bottom + 20}' text-anchor='middle'>"
            f"{html.escape(label)}</text>"
        )
    parts.append(
        f"<text class='axis-title' x='{left + plot_w / 2:.1f}' y='{height - 8}'"
        f" text-anchor='middle'>{html.escape(x_title)}</text></svg>"
    )
    return f"<figure><figcaption>{html.escape(title)}</figcaption>{''.join(parts)}</figure>"


# -- the command ---------------------------------------------------------------------------


def what_if_workers(text: str) -> tuple[int, ...]:
    """The argparse type of C{--what-if}: L{whatif.parse_workers}."""
    try:
        return whatif.parse_workers(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="quicx report", description="A report over the daemon's lifecycle events."
    )
    parser.add_argument("events", nargs="+", help="event files or directories (any Spark URI)")
    parser.add_argument("--out", required=True, help="where the tables and report.html go")
    parser.add_argument("--master", help="the Spark master (default: local[*], or spark-submit's)")
    parser.add_argument(
        "--what-if",
        type=what_if_workers,
        default=(),
        metavar="workers=N,N...",
        help="also replay the workload with these numbers of workers (docs/pipeline.md)",
    )
    args = parser.parse_args(argv)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from quicx.clients.spark import use_this_python

    builder = SparkSession.builder.appName("quicx report")
    if args.master:
        builder = builder.master(args.master)
    elif not SparkConf().contains("spark.master"):
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    use_this_python(spark)
    try:
        started = time.monotonic()
        report = build_report(spark, args.events, args.out, args.what_if)
        page = render_html(report)
        if "://" in args.out and not args.out.startswith("file://"):
            target = "report.html"  # the tables went to the URI; the page stays here
        else:
            Path(args.out.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
            target = str(Path(args.out.removeprefix("file://")) / "report.html")
        Path(target).write_text(page, encoding="utf-8")
        progress(f"wrote {target} in {time.monotonic() - started:.1f} s")
        print(json.dumps({"events": report.events, "report": target}))
    finally:
        spark.stop()
    return 0
