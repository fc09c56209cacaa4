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
    as C{quicx status} counts them), queue wait (first dispatch - when it
    became due: its submit, or a delayed task's due time) and
    run time (outcome - its dispatch) at p50 / p95 / p99 / max, in
    milliseconds;
  - C{throughput/}: per minute and type, tasks submitted, completed, failed;
  - C{failures/}: the most frequent failure reasons per type, without a
    traceback, normalised (L{normalise_reason}: numbers, addresses, ids become
    placeholders), each with a count and one reason as written;
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
and its id; a task recovered from a journal by a later daemon is joined to
the run that submitted it (L{_with_origin}).  Percentiles are exact (linear
interpolation between ranks).
Files of the release before protocol version 2 have no C{queue} or
C{priority}: their tasks count as queue C{default}, priority 0 (where a
version-1 SUBMIT goes, on a daemon with no C{[queues]} settings).
"""

from __future__ import annotations

import argparse
import glob
import html
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attrs import Factory, define, frozen

from quicx.protocol.monitor import EVENTS_SCHEMA
from quicx.report import whatif
from quicx.report.page import CSS, PERCENTILES, bar_chart, html_table, ms, throughput_chart

EVENT_SCHEMA = (
    "v LONG, t LONG, event STRING, task LONG, type STRING, size LONG, producer LONG,"
    " worker LONG, attempt LONG, reason STRING, cause STRING, code LONG,"
    " queue STRING, priority LONG, due LONG"
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
KINDS_BY = ("submitted", "recovered")
"""The events that say what a task is (its type, queue, priority), the first first."""

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


TRACEBACK = "\nTraceback (most recent call last):"
"""Where the traceback the Python worker sends after a failure's reason begins."""


def normalise_reason(reason: str) -> str:
    """
    C{reason} without the traceback the Python worker sends after it, with
    its numbers, addresses, ids and hex as placeholders.
    """
    reason = reason.split(TRACEBACK, 1)[0]
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


class ReportError(Exception):
    """The report cannot be made from these events (a one-line error, no traceback)."""


def progress(message: str) -> None:
    print(f"quicx report: {message}", file=sys.stderr, flush=True)


@define
class Timings:
    """
    Seconds spent in each phase of a report, in order (C{quicx report
    --timings}).  Spark computes lazily: each phase ends with the action that
    computes its tables, so a phase's seconds are its own work.

    @ivar phases: (phase, seconds), in the order they ran.
    """

    phases: list[tuple[str, float]] = Factory(list)
    clock: Callable[[], float] = time.monotonic

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase C{name}."""
        started = self.clock()
        try:
            yield
        finally:
            self.phases.append((name, self.clock() - started))

    def lines(self) -> list[str]:
        """One line per phase, and the total."""
        width = max((len(name) for name, _ in self.phases), default=5)
        total = sum(seconds for _, seconds in self.phases)
        return [
            f"{name:<{width}} {seconds:7.2f} s"
            for name, seconds in [*self.phases, ("total", total)]
        ]


def build_report(
    spark: Any,
    paths: list[str],
    out: str | None = None,
    timings: Timings | None = None,
    what_if: tuple[int, ...] = (),
) -> Report:
    """
    Compute the report from the event files at C{paths}; write it to C{out}.
    C{what_if}: the worker counts of the capacity what-if (L{capacity}).

    The events are parsed once and kept in memory; so are the frames that
    most tables use (one row per task submitted, from one pass over the
    events; the runs), and each table, which is computed once and then both
    written and collected.
    """
    timings = timings or Timings()
    kept: list[Any] = []

    def keep(frame: Any) -> Any:
        kept.append(frame.cache())
        return frame

    try:
        return _compute(spark, paths, out, timings, what_if, keep)
    finally:  # a report refused half-way too: its frames leave the session's memory
        for frame in kept:
            frame.unpersist()


def _compute(
    spark: Any,
    paths: list[str],
    out: str | None,
    timings: Timings,
    what_if: tuple[int, ...],
    keep: Callable[[Any], Any],
) -> Report:
    """L{build_report}'s work, each frame it keeps given to C{keep}."""
    from pyspark.sql import functions as F

    events, count, recovered = _read_events(spark, paths, timings, keep)
    progress(f"{count:,} events")
    tasks = _with_origin(events.where(F.col("task").isNotNull()), recovered)
    if recovered:  # a join: computed once
        tasks = keep(tasks)
    frames = _TaskFrames.of(tasks, keep)
    with timings.phase("tasks"):
        frames.submitted.count()
        frames.runs.count()

    def table(name: str, frame: Any) -> list[dict[str, Any]]:
        """C{frame}, computed once (phase C{name}): kept to be written, and its rows."""
        with timings.phase(name):
            return [row.asDict() for row in keep(frame).collect()]

    progress("computing the summary")
    counts = keep(_counts(events, frames.gave_up, frames.per_task))
    tables = {"summary": _summary(counts, frames.runs, frames.waits, frames.never)}
    summary_rows = table("summary", tables["summary"])
    progress("computing the queues")
    tables["queues"] = _queues(frames.per_task, frames.waits, frames.never)
    queue_rows = table("queues", tables["queues"])
    progress("computing throughput, failures and workers")
    tables["throughput"] = _throughput(tasks)
    throughput_rows = table("throughput", tables["throughput"])
    tables["failures"] = _failures(frames.outcomes)
    failure_rows = table("failures", tables["failures"])
    tables["workers"] = _workers(frames.runs)
    worker_rows = table("workers", tables["workers"])
    with timings.phase("histograms"):
        wait_histogram = _histogram(frames.waits, "wait_ms")
        run_histogram = _histogram(frames.runs, "run_ms")
    if out is not None:
        progress(f"writing Parquet tables to {out}")
        with timings.phase("parquet"):
            _write_tables(out, tables, frames.never)
    predicted = None
    if what_if:
        with timings.phase("what-if"):
            predicted = _what_if(spark, events, what_if, out)
    return Report(
        summary=summary_rows,
        throughput=throughput_rows,
        failures=failure_rows,
        workers=worker_rows,
        queues=queue_rows,
        never_completed=frames.never.count(),
        events=count,
        wait_histogram=wait_histogram,
        run_histogram=run_histogram,
        what_if=predicted,
    )


def _read_events(
    spark: Any, paths: list[str], timings: Timings, keep: Callable[[Any], Any]
) -> tuple[Any, int, int]:
    """
    The events at C{paths} (phase C{read}), each with its C{run}, kept; how
    many there are, and how many of them are C{recovered}.

    @raise ReportError: a path names nothing, or an event is of a newer schema.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    progress(f"reading {', '.join(paths)} on {spark.sparkContext.master}")
    with timings.phase("read"):
        try:
            read = spark.read.schema(EVENT_SCHEMA).json(paths)
        except AnalysisException as e:
            # getCondition since PySpark 4.0; getErrorClass, deprecated there, before.
            if getattr(e, "getCondition", e.getErrorClass)() != "PATH_NOT_FOUND":
                raise
            path = e.getMessageParameters().get("path", ", ".join(paths))
            raise ReportError(f"{path}: no such file or directory") from None
        events = keep(
            read.withColumn(
                "run", F.regexp_extract(F.input_file_name(), r"events-[0-9T]+-([0-9]+)-", 1)
            )
            # Files of the previous release have neither: their tasks were all
            # in the one queue, at one priority.
            .withColumn("queue", F.coalesce(F.col("queue"), F.lit("default")))
            .withColumn("priority", F.coalesce(F.col("priority"), F.lit(0)))
        )
        count, newest, recovered = events.agg(
            F.count("*"), F.max("v"), F.count(F.when(F.col("event") == "recovered", 1))
        ).first()
    if newest is not None and newest > EVENTS_SCHEMA:
        raise ReportError(
            f"events of schema version {newest} (a newer daemon's): this report reads"
            f" versions 1 to {EVENTS_SCHEMA}"
        )
    return events, count, recovered


@frozen
class _TaskFrames:
    """
    The frames most tables use, made from the events of tasks.

    @ivar per_task: one row per task (L{_per_task}).
    @ivar submitted: the tasks submitted (in these files: their submitted or
        recovered event).
    @ivar waits: the submitted tasks dispatched, with their C{wait_ms}.
    @ivar never: the submitted tasks never done, failed or cancelled.
    @ivar outcomes: the done and failed events.
    @ivar runs: the outcomes a worker reported, with their dispatch and C{run_ms}.
    @ivar gave_up: the attempts the daemon gave up (a failed event with no worker).
    """

    per_task: Any
    submitted: Any
    waits: Any
    never: Any
    outcomes: Any
    runs: Any
    gave_up: Any

    @classmethod
    def of(cls, tasks: Any, keep: Callable[[Any], Any]) -> _TaskFrames:
        """The frames of C{tasks}; the one row per task and the runs kept."""
        from pyspark.sql import functions as F

        per_task = keep(_per_task(tasks))
        submitted = per_task.where("submitted")
        waits = submitted.where("dispatched").withColumn(
            "wait_ms", F.greatest(F.col("first_t") - F.col("due_t"), F.lit(0))
        )
        never = submitted.where("NOT finished").select(
            F.col("origin").alias("run"), "task", "submitted_t", "type", "queue", "priority"
        )
        dispatched = tasks.where("event = 'dispatched'").select(
            "run", "task", "attempt", F.col("t").alias("dispatched_t"), "worker"
        )
        outcomes = tasks.where("event IN ('done', 'failed')").select(
            "run",
            "task",
            "attempt",
            "event",
            "reason",
            "worker",
            F.col("t").alias("outcome_t"),
            "type",
        )
        # A run is an outcome a worker reported, with its dispatch (the same
        # attempt, to the same worker).  A give-up -- the daemon failing a task
        # no worker holds, after its last allowed delivery was lost or timed out
        # -- is a failed event with no worker: an outcome, not a run.
        runs = keep(
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
        return cls(per_task, submitted, waits, never, outcomes, runs, gave_up)


def _per_task(tasks: Any) -> Any:
    """
    One row per task, from one pass over its events: when it was submitted
    (and as what), when it became due, first dispatched, how it ended.
    """
    from pyspark.sql import functions as F

    event = F.col("event")

    def seen(condition: Any) -> Any:
        return F.count(F.when(condition, 1)) > 0

    def first_of(kind: str, column: Any) -> Any:
        return F.min(F.when(event == kind, column))

    def described(column: str) -> Any:
        # As submitted; as recovered if its submitted line was lost; as any
        # event says if it was submitted before the files began.
        return F.coalesce(
            *(F.first(F.when(event == kind, F.col(column)), ignorenulls=True) for kind in KINDS_BY),
            F.first(column, ignorenulls=True),
        )

    # A task a bulk action moved counts in the queue it was moved to last.
    moved_to = F.max(F.when(event == "moved", F.struct("t", "queue")))["queue"]

    # A delayed task is due at its `due`; one that comes back from the
    # journal with its submitted line lost is submitted as it is recovered.
    due = F.greatest(F.col("t"), F.coalesce(F.col("due"), F.col("t")))
    return (
        tasks.groupBy("origin", "task")
        .agg(
            seen(event.isin(*KINDS_BY)).alias("submitted"),
            F.coalesce(first_of("submitted", F.col("t")), first_of("recovered", F.col("t"))).alias(
                "submitted_t"
            ),
            F.coalesce(first_of("submitted", due), first_of("recovered", due)).alias("due_t"),
            described("type").alias("type"),
            F.coalesce(moved_to, described("queue")).alias("queue"),
            described("priority").alias("priority"),
            seen(event == "dispatched").alias("dispatched"),
            F.min(F.when(event == "dispatched", F.col("t"))).alias("first_t"),
            seen(event == "done").alias("completed"),
            seen(event == "failed").alias("failed"),
            seen(event == "cancelled").alias("cancelled"),
            seen(event == "expired").alias("expired"),
        )
        # Cancelled and expired tasks never ran, and were not lost: they are
        # not "never completed".
        .withColumn(
            "finished",
            F.col("completed") | F.col("failed") | F.col("cancelled") | F.col("expired"),
        )
    )


def _throughput(tasks: Any) -> Any:
    """The throughput table: per minute and type, tasks submitted, completed, failed."""
    from pyspark.sql import functions as F

    return (
        tasks.where("event IN ('submitted', 'done', 'failed')")
        .withColumn("minute", (F.col("t") / 60000).cast("long") * 60000)
        .groupBy("minute", "type")
        .pivot("event", ["submitted", "done", "failed"])
        .count()
        .fillna(0)
        .withColumnRenamed("done", "completed")
        .orderBy("minute", "type")
    )


def _failures(outcomes: Any) -> Any:
    """The failures table: the most frequent reasons per type, normalised, untraced."""
    from pyspark.sql import functions as F

    untraced = F.substring_index(F.col("reason"), TRACEBACK, 1)
    normalised = untraced
    for pattern, placeholder in REASON_PATTERNS:
        normalised = F.regexp_replace(normalised, pattern, placeholder)
    return (
        outcomes.where("event = 'failed'")
        .withColumn("cause", normalised)
        .groupBy("type", "cause")
        .agg(F.count("*").alias("count"), F.min(untraced).alias("example"))
        .withColumnRenamed("cause", "reason")
        .orderBy(F.desc("count"), "type", "reason")
        .limit(TOP_REASONS * 10)
    )


def _workers(runs: Any) -> Any:
    """The workers table: per worker connection, tasks finished and busy time."""
    from pyspark.sql import functions as F

    return (
        runs.groupBy("run", "worker")
        .agg(F.count("*").alias("tasks"), F.sum("run_ms").alias("busy_ms"))
        .orderBy(F.desc("tasks"), "run", "worker")
    )


def _write_tables(out: str, tables: dict[str, Any], never: Any) -> None:
    """The tables as Parquet under C{out}, with the tasks never completed."""
    for name in ("summary", "throughput", "failures", "workers", "queues"):
        # Small, and in order: one file each.
        tables[name].coalesce(1).write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}")
    never.write.mode("overwrite").parquet(f"{out.rstrip('/')}/never_completed")


def _with_origin(tasks: Any, recovered: int) -> Any:
    """
    C{tasks} (the events of tasks) with C{origin}: the daemon run (pid) the
    task was submitted in.  A task a daemon recovered from its journal keeps
    its id, and its events after the restart (C{recovered}, then dispatched,
    done...) are in the new run's files: they belong to the latest earlier
    run that has its C{submitted} event (runs in the order of their first
    events).  A task recovered with no such run (its submitted line was lost
    with the crash) is its recovering run's: the C{recovered} event stands
    for its submit.  C{recovered}: how many C{recovered} events there are
    (with none, each event's origin is its own run).
    """
    from pyspark.sql import functions as F

    if not recovered:
        return tasks.withColumn("origin", F.col("run"))
    starts = tasks.groupBy("run").agg(F.min("t").alias("start"))
    back = tasks.where("event = 'recovered'").select("run", "task").distinct().join(starts, "run")
    before = (
        tasks.where("event = 'submitted'")
        .select(F.col("run").alias("origin"), "task")
        .distinct()
        .join(starts.select(F.col("run").alias("origin"), F.col("start").alias("began")), "origin")
    )
    links = (
        back.join(before, "task")
        .where(F.col("began") < F.col("start"))
        .groupBy("run", "task")
        .agg(F.max_by("origin", "began").alias("origin"))
    )
    return tasks.join(links, ["run", "task"], "left").withColumn(
        "origin", F.coalesce(F.col("origin"), F.col("run"))
    )


def _latency(frame: Any, column: str, prefix: str, *by: str) -> Any:
    """C{column}'s percentiles (an array, C{PREFIX_p}) and maximum, by C{by}."""
    from pyspark.sql import functions as F

    pct = "array(" + ", ".join(str(p) for p in PERCENTILES) + ")"
    return frame.groupBy(*by).agg(
        F.expr(f"percentile({column}, {pct})").alias(f"{prefix}_p"),
        F.max(column).alias(f"{prefix}_max_ms"),
    )


def _counts(events: Any, gave_up: Any, per_task: Any) -> Any:
    """
    The summary's counts (but never completed) per type: submitted,
    completed and failed are tasks (of C{per_task}), the others events.
    """
    from pyspark.sql import functions as F

    # The daemon records "requeued" before it decides to give up; like
    # `quicx status`, a requeue that ended in a give-up is counted as given
    # up, not as requeued.
    event = F.col("event")
    given_up = (event == "failed") & F.col("worker").isNull()
    requeued = (event == "requeued") & F.col("gave_up").isNull()
    # (Give-ups are few: each executor gets them all, and the events stay
    # where they are.)
    steps = (
        events.join(F.broadcast(gave_up), ["run", "task", "attempt"], "left")
        .groupBy("type")
        .agg(
            *(
                F.sum(F.when(condition, 1).otherwise(0)).alias(name)
                for condition, name in (
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
    return _task_counts(per_task, "type").join(steps, "type", "full").fillna(0)


def _task_counts(per_task: Any, *by: str) -> Any:
    """Tasks submitted, completed, failed and cancelled, by C{by}."""
    from pyspark.sql import functions as F

    return per_task.groupBy(*by).agg(
        *(
            F.sum(F.col(flag).cast("long")).alias(flag)
            for flag in ("submitted", "completed", "failed", "cancelled")
        )
    )


def _summary(counts: Any, runs: Any, waits: Any, never: Any) -> Any:
    """The summary table: counts and latencies per type, and overall (type C{*})."""
    from pyspark.sql import functions as F

    never_by_type = never.groupBy("type").agg(F.count("*").alias("never_completed"))
    per_type = (
        counts.join(never_by_type, "type", "left")
        .join(_latency(waits, "wait_ms", "wait", "type"), "type", "left")
        .join(_latency(runs, "run_ms", "run", "type"), "type", "left")
    )
    overall = (
        counts.agg(*(F.sum(c).alias(c) for c in counts.columns if c != "type"))
        .crossJoin(never.agg(F.count("*").alias("never_completed")))
        .crossJoin(_latency(waits, "wait_ms", "wait"))
        .crossJoin(_latency(runs, "run_ms", "run"))
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
    # Over no events, the overall sums are null: they are 0.
    return summary.fillna(0, subset=list(COUNTS)).select(columns).orderBy("type")


def _queues(per_task: Any, waits: Any, never: Any) -> Any:
    """The per-queue table: counts and queue waits per queue and priority."""
    from pyspark.sql import functions as F

    queue_counts = _task_counts(per_task, "queue", "priority")
    queue_never = never.groupBy("queue", "priority").agg(F.count("*").alias("never_completed"))
    queue_waits = _latency(waits, "wait_ms", "wait", "queue", "priority")
    return (
        queue_counts.join(queue_never, ["queue", "priority"], "left")
        .join(queue_waits, ["queue", "priority"], "left")
        .fillna(0, subset=["never_completed"])
        .withColumn("wait_p50_ms", F.col("wait_p")[0])
        .withColumn("wait_p95_ms", F.col("wait_p")[1])
        .select("queue", "priority", *QUEUE_COUNTS, "wait_p50_ms", "wait_p95_ms")
        .orderBy("queue", F.desc("priority"))
    )


def _what_if(spark: Any, events: Any, workers: tuple[int, ...], out: str | None) -> Any:
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
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{report.events:,} events; {overall.get('submitted', 0):,} tasks submitted,"
        f" {overall.get('completed', 0):,} completed, {overall.get('failed', 0):,} failed"
        f" ({overall.get('given_up', 0):,} of them given up),"
        f" {overall.get('requeued', 0):,} requeued, {cancelled:,} cancelled,"
        f" {report.never_completed:,} never completed.</p>",
        "<h2>Throughput</h2>",
        throughput_chart(report.throughput),
        "<h2>Queue wait and run time</h2><div class='row'>",
        bar_chart(
            "Tasks by queue wait",
            [(ms(start), c) for start, c in report.wait_histogram],
            x_title="queue wait, ms (log scale)",
        ),
        bar_chart(
            "Tasks by run time",
            [(ms(start), c) for start, c in report.run_histogram],
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
        " dropped, or lost). Queue wait: first dispatch &minus; when it became due (its submit,"
        " or its due time if delayed). Events of the release"
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
    parser.add_argument(
        "--timings", action="store_true", help="print the seconds each phase took to stderr"
    )
    args = parser.parse_args(argv)
    missing = missing_input(args.events)
    if missing is not None:  # before the JVM: seconds, and its log
        progress(f"error: {missing}: no such file or directory")
        return 1
    timings = Timings()
    with timings.phase("spark start"):
        spark = start_spark(args.master)
    try:
        try:
            report = build_report(spark, args.events, args.out, timings, args.what_if)
        except ReportError as e:
            progress(f"error: {e}")
            return 1
        with timings.phase("html"):
            page = render_html(report)
            if "://" in args.out and not args.out.startswith("file://"):
                target = "report.html"  # the tables went to the URI; the page stays here
            else:
                Path(args.out.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
                target = str(Path(args.out.removeprefix("file://")) / "report.html")
            Path(target).write_text(page, encoding="utf-8")
        progress(f"wrote {target} in {sum(s for _, s in timings.phases[1:]):.1f} s")
        if args.timings:
            for line in timings.lines():
                progress(line)
        print(json.dumps({"events": report.events, "report": target}))
    finally:
        spark.stop()
    return 0


def missing_input(paths: list[str]) -> str | None:
    """
    The first of C{paths} (local paths, C{file://} URIs, globs) that names
    nothing, or C{None}.  Other URIs (C{s3a://}, C{hdfs://}) are left to
    Spark, as are globs with C{{a,b}} (Hadoop's, not Python's).
    """
    for path in paths:
        if "://" in path and not path.startswith("file://"):
            continue
        local = path.removeprefix("file://")
        if "{" in local:
            continue
        if not (glob.glob(local) if glob.has_magic(local) else os.path.exists(local)):
            return path
    return None


LOG_SETTINGS = Path(__file__).with_name("log4j2.properties")
"""The JVM's log settings when the report starts it: errors only."""


def quiet_log(conf: Any) -> None:
    """
    Have the JVM the report starts (not spark-submit's, which is started)
    log errors only (L{LOG_SETTINGS}), unless log settings were given:
    C{log4j2.properties} in C{SPARK_CONF_DIR}, or driver Java options in
    its C{spark-defaults.conf}.
    """
    home = Path(os.environ.get("SPARK_HOME", "/nonexistent"))
    conf_dir = Path(os.environ.get("SPARK_CONF_DIR") or home / "conf")
    defaults = conf_dir / "spark-defaults.conf"
    if (
        "PYSPARK_GATEWAY_PORT" in os.environ
        or (conf_dir / "log4j2.properties").exists()
        or (defaults.exists() and "spark.driver.extraJavaOptions" in defaults.read_text())
    ):
        return
    conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG_SETTINGS}")


def start_spark(master: str | None) -> Any:
    """
    The report's Spark session: on C{master}, else spark-submit's (C{local[*]}
    when it was given none).  Settings the user gave (C{spark-submit --conf},
    C{spark-defaults.conf}) are kept, but for two:

      - Spark's console progress bars are off when stderr is not a terminal
        (they would flood a log);
      - on a local master, there are as many shuffle partitions as cores,
        unless the user set how many (Spark's 200 are for clusters: here each
        is a task run in turn).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    from quicx.clients.spark import use_this_python

    # With no JVM yet, SparkConf() is an empty dict: start (or, under
    # spark-submit, join) the JVM first, so that it holds spark-submit's
    # --master and --conf, and spark-defaults.conf's settings.
    launch = SparkConf(loadDefaults=False)
    quiet_log(launch)
    SparkContext._ensure_initialized(conf=launch)
    given = SparkConf()
    builder = SparkSession.builder.appName("quicx report")
    if master:
        builder = builder.master(master)
    elif not given.contains("spark.master"):
        builder = builder.master("local[*]")
    if not sys.stderr.isatty():
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    context = spark.sparkContext
    if context.master.startswith("local") and not given.contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(context.defaultParallelism))
    use_this_python(spark)
    return spark
