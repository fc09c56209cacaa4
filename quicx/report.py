"""
The lifecycle-event report: a PySpark job over the daemon's event files.

    quicx report /var/lib/quicx/events --out report/          # local[*]
    quicx report s3a://bucket/events/ --out report/ --master spark://m:7077
    JOB=$(python -c 'import quicx.jobs.report_job as j; print(j.__file__)')
    spark-submit --master yarn "$JOB" hdfs:///quicx/events --out hdfs:///quicx/report

It reads the NDJSON files (any path or URI Spark reads), and writes to
C{--out}:

  - C{summary/}: per task type and overall (type C{*}), the counts
    (submitted, completed, failed, requeued, rejected, dropped, never
    completed), queue wait (first dispatch - submit) and run time (outcome -
    its dispatch) at p50 / p95 / p99 / max, in milliseconds;
  - C{throughput/}: per minute and type, tasks submitted, completed, failed;
  - C{failures/}: the most frequent failure reasons per type;
  - C{workers/}: per worker connection, tasks finished and busy time;
  - C{never_completed/}: tasks submitted and never done or failed;
  - C{report.html}: all of it in one self-contained page, with charts.

Tables are Parquet.  Task ids restart when a daemon without a journal
restarts, so a task is identified by the daemon's pid (from the file name)
and its id.  Percentiles are exact (linear interpolation between ranks).
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attrs import frozen

EVENT_SCHEMA = (
    "t LONG, event STRING, task LONG, type STRING, size LONG, producer LONG,"
    " worker LONG, attempt LONG, reason STRING, cause STRING, code LONG"
)
PERCENTILES = (0.5, 0.95, 0.99)
TOP_REASONS = 10


@frozen
class Report:
    """The report's tables, collected to the driver (they are small)."""

    summary: list[dict[str, Any]]
    throughput: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    never_completed: int
    events: int
    wait_histogram: list[tuple[float, int]]
    run_histogram: list[tuple[float, int]]


def progress(message: str) -> None:
    print(f"quicx report: {message}", file=sys.stderr, flush=True)


def build_report(spark: Any, paths: list[str], out: str | None = None) -> Report:
    """Compute the report from the event files at C{paths}; write it to C{out}."""
    from pyspark.sql import functions as F

    progress(f"reading {', '.join(paths)}")
    events = (
        spark.read.schema(EVENT_SCHEMA)
        .json(paths)
        .withColumn("run", F.regexp_extract(F.input_file_name(), r"events-[0-9T]+-([0-9]+)-", 1))
        .cache()
    )
    count = events.count()
    progress(f"{count:,} events")
    tasks = events.where(F.col("task").isNotNull())

    submitted = (
        tasks.where("event = 'submitted'")
        .groupBy("run", "task")
        .agg(F.min("t").alias("submitted_t"), F.first("type").alias("type"))
    )
    dispatched = tasks.where("event = 'dispatched'").select(
        "run", "task", "attempt", F.col("t").alias("dispatched_t"), "worker"
    )
    first_dispatch = dispatched.groupBy("run", "task").agg(F.min("dispatched_t").alias("first_t"))
    outcomes = tasks.where("event IN ('done', 'failed')").select(
        "run", "task", "attempt", "event", "reason", F.col("t").alias("outcome_t"), "type"
    )
    # A run is an outcome with the dispatch of the same attempt; a task given
    # up (failed with no worker) has no run.
    runs = outcomes.join(dispatched, ["run", "task", "attempt"], "inner").withColumn(
        "run_ms", F.col("outcome_t") - F.col("dispatched_t")
    )
    waits = submitted.join(first_dispatch, ["run", "task"]).withColumn(
        "wait_ms", F.col("first_t") - F.col("submitted_t")
    )

    progress("computing the summary")
    counts = events.groupBy("type").agg(
        *(
            F.sum(F.when(F.col("event") == kind, 1).otherwise(0)).alias(name)
            for kind, name in (
                ("submitted", "submitted"),
                ("done", "completed"),
                ("failed", "failed"),
                ("requeued", "requeued"),
                ("rejected", "rejected"),
                ("dropped", "dropped"),
            )
        )
    )
    finished = outcomes.select("run", "task").distinct()
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
    columns = ["type", "submitted", "completed", "failed", "requeued", "rejected", "dropped"]
    columns += ["never_completed"]
    for prefix in ("wait", "run"):
        columns += [f"{prefix}_p{round(p * 100)}_ms" for p in PERCENTILES]
        columns.append(f"{prefix}_max_ms")
    summary = summary.fillna(0, subset=["never_completed"]).select(columns).orderBy("type")

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
    failures = (
        outcomes.where("event = 'failed'")
        .groupBy("type", "reason")
        .count()
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
            ("never_completed", never),
        ):
            frame.write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}")

    report = Report(
        summary=[row.asDict() for row in summary.collect()],
        throughput=[row.asDict() for row in throughput.collect()],
        failures=[row.asDict() for row in failures.collect()],
        workers=[row.asDict() for row in workers.collect()],
        never_completed=never.count(),
        events=count,
        wait_histogram=_histogram(waits, "wait_ms"),
        run_histogram=_histogram(runs, "run_ms"),
    )
    events.unpersist()
    return report


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


def render_html(report: Report, title: str = "Quicx task report") -> str:
    """A self-contained page: tables, and SVG charts (no scripts, no fetches)."""
    overall = next((row for row in report.summary if row["type"] == "*"), {})
    minutes = sorted({row["minute"] for row in report.throughput})
    by_minute = {
        m: sum(r["completed"] for r in report.throughput if r["minute"] == m) for m in minutes
    }
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{report.events:,} events; {overall.get('submitted', 0):,} tasks submitted,"
        f" {overall.get('completed', 0):,} completed, {overall.get('failed', 0):,} failed,"
        f" {report.never_completed:,} never completed.</p>",
        "<h2>Throughput</h2>",
        _bar_chart(
            "tasks completed per minute",
            [(m / 1000, by_minute[m]) for m in minutes],
            width=900,
            label_of=lambda start: time.strftime("%H:%M UTC", time.gmtime(start)),
        ),
        "<h2>Queue wait and run time</h2><div class='row'>",
        _bar_chart("tasks by queue wait, ms (log scale)", report.wait_histogram),
        _bar_chart("tasks by run time, ms (log scale)", report.run_histogram),
        "</div><h2>By task type</h2>",
        _table(report.summary),
        "<h2>Top failure reasons</h2>",
        _table(report.failures),
        f"<h2>Workers ({len(report.workers):,})</h2>",
        _table(report.workers[:25]),
        f"<p>{len(report.workers) - 25:,} more in <code>workers/</code>.</p>"
        if len(report.workers) > 25
        else "",
        "</body></html>",
    ]
    return "\n".join(parts)


_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; display: block; overflow-x: auto; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
th { background: #f0f0f0; } .row { display: flex; gap: 2em; }
svg { background: #fafafa; border: 1px solid #ddd; }
"""


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>(none)</p>"
    columns = list(rows[0])

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.1f}"
        if isinstance(value, int):
            return f"{value:,}"
        return html.escape("" if value is None else str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell(row[c])}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _bar_chart(
    label: str,
    buckets: list[tuple[float, int]],
    width: int = 440,
    label_of: Callable[[float], str] = lambda start: f"{start:,.0f} ms",
) -> str:
    """Bars of (bucket start, count), with the first, middle and last starts labelled."""
    height = 220
    if not buckets:
        return f"<p>{html.escape(label)}: (none)</p>"
    top = max(count for _, count in buckets) or 1
    bar = min((width - 20) / len(buckets), 60)
    bars = "".join(
        f"<rect x='{10 + i * bar:.1f}' y='{height - 30 - (c / top) * (height - 60):.1f}'"
        f" width='{max(bar - 1, 1):.1f}' height='{(c / top) * (height - 60):.1f}'"
        f" fill='#1f6f8b'><title>{html.escape(label_of(start))}: {c:,}</title></rect>"
        for i, (start, c) in enumerate(buckets)
    )
    last = len(buckets) - 1
    ticks = "".join(
        f"<text x='{10 + (i + (0 < i == last)) * bar:.1f}' y='{height - 10}'"
        f" text-anchor='{'end' if i == last and i else 'start'}'>"
        f"{html.escape(label_of(buckets[i][0]))}</text>"
        for i in sorted({0, len(buckets) // 2, last})
    )
    return (
        f"<svg width='{width}' height='{height}' role='img'>{bars}{ticks}"
        f"<text x='10' y='16'>{html.escape(label)} (max {top:,})</text></svg>"
    )


# -- the command ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="quicx report", description="A report over the daemon's lifecycle events."
    )
    parser.add_argument("events", nargs="+", help="event files or directories (any Spark URI)")
    parser.add_argument("--out", required=True, help="where the tables and report.html go")
    parser.add_argument("--master", help="the Spark master (default: local[*], or spark-submit's)")
    args = parser.parse_args(argv)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from quicx.spark import use_this_python

    builder = SparkSession.builder.appName("quicx report")
    if args.master:
        builder = builder.master(args.master)
    elif not SparkConf().contains("spark.master"):
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    use_this_python(spark)
    try:
        started = time.monotonic()
        report = build_report(spark, args.events, args.out)
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
