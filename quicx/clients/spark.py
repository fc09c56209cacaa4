"""
Bulk submit from Spark: one task per row of a DataFrame, sent from the
executors.

    from quicx.clients.spark import submit_dataframe

    ids = submit_dataframe(
        orders, "tcp:queue.internal:16381",
        key_column="order_id", task_type="send_receipt",   # or type_column=
        payload_column="body",                             # or the row as JSON
    )
    ids.show()     # order_id | task_id

Each partition is sent over one pipelined blocking connection.  A row the
daemon refuses with C{queue full} was not accepted, so it is sent again after
a backoff (0.05 s doubling to 2 s, for up to C{retry_for} seconds): no row
is lost, and none is submitted twice.  Any other refusal (payload too large,
unknown type) fails the job with that error.

As a group, so a pipeline learns when the whole DataFrame has been
processed (protocol version 2):

    batch = submit_dataframe_group(orders, "tcp:queue.internal:16381",
                                   key_column="order_id", task_type="send_receipt")
    batch.ids.show()
    counts = batch.wait(timeout=3600)   # {"done": ..., "failed": ..., ...}

The driver opens the group, the executors submit into it, and the driver
closes it once every row is in.  Each row's SUBMIT carries the idempotency
key C{group-ID:KEY}: a partition sent again (a lost executor's, recomputed)
is answered as duplicates, and neither runs nor counts twice.

The result is computed once, when this function runs, and kept
(C{MEMORY_AND_DISK}).  Spark recomputes a partition only if an executor
holding it is lost.  Recomputing would submit that partition's rows again,
which is the same at-least-once promise a producer gets when its connection
drops.

On a local master (C{local[*]} and the like), the executors run this
interpreter (C{sys.executable}) unless C{PYSPARK_PYTHON} names another: see
L{use_this_python}.

Needs C{pip install 'quicx[spark]'} (PySpark) and Java.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from attrs import evolve, frozen

from quicx.clients.blocking import QuicxClient, Task
from quicx.clients.requests import Options
from quicx.protocol.errors import DaemonError, QueueFull

FIRST_BACKOFF = 0.05
MAX_BACKOFF = 2.0


@frozen
class _Plan:
    """What each executor needs to send its partition (pickled to it)."""

    address: str
    key_column: str
    task_type: str | None
    type_column: str | None
    payload_column: str | None
    window: int
    retry_for: float
    group: int | None = None


@frozen
class SubmittedGroup:
    """
    A DataFrame submitted as one group: C{ids}, a DataFrame of (key,
    task_id), and the C{group} they joined on the daemon at C{address}.
    """

    ids: Any
    group: int
    address: str

    def state(self) -> dict[str, Any]:
        """The group's counts now (see L{QuicxClient.group})."""
        with QuicxClient(self.address) as client:
            return client.group(self.group)

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """
        Wait up to C{timeout} seconds for every row's task to finish; the
        final counts.  @raise quicx.NotFinished: not within C{timeout}.
        """
        with QuicxClient(self.address, timeout=timeout or 30.0) as client:
            return client.wait_group(self.group, timeout)


def use_this_python(spark: Any) -> bool:
    """
    Have a local master's executors run this interpreter, which has quicx.

    PySpark otherwise starts C{python3} from C{PATH}, which need not have
    quicx (or even PySpark) installed.  Nothing changes when the master is not
    local (a cluster's executors run the cluster's Python) or when the user
    chose one: C{PYSPARK_PYTHON} set, or C{spark.pyspark.python} configured.

    @return: whether the executors' interpreter was set.
    """
    context = spark.sparkContext
    if not context.master.startswith("local") or "PYSPARK_PYTHON" in os.environ:
        return False
    if context.getConf().get("spark.pyspark.python") is not None:
        return False
    context.pythonExec = sys.executable
    return True


def submit_dataframe(
    df: Any,
    address: str,
    *,
    key_column: str,
    task_type: str | None = None,
    type_column: str | None = None,
    payload_column: str | None = None,
    window: int = 1000,
    retry_for: float = 600.0,
) -> Any:
    """
    Submit one task per row of C{df}; return a DataFrame of (key, task_id).

    @param key_column: the column that identifies a row in the result.
    @param task_type: the type of every task, or...
    @param type_column: ...the column holding each row's type.
    @param payload_column: a column of bytes or str; without it, each
        payload is the row as a JSON object.
    @param window: SUBMITs pipelined before reading their answers.
    @param retry_for: seconds to keep retrying rows refused as queue full.
    @raise ValueError: the columns are not there, or not one type source.
    """
    plan = _plan(df, address, key_column, task_type, type_column, payload_column)
    return _submit(df, evolve(plan, window=window, retry_for=retry_for))


def submit_dataframe_group(
    df: Any,
    address: str,
    *,
    key_column: str,
    task_type: str | None = None,
    type_column: str | None = None,
    payload_column: str | None = None,
    window: int = 1000,
    retry_for: float = 600.0,
) -> SubmittedGroup:
    """
    L{submit_dataframe}, the rows' tasks one group (the key column's values
    must be unique: they make the tasks' idempotency keys).

    @return: the ids and the group, to wait for.
    """
    plan = _plan(df, address, key_column, task_type, type_column, payload_column)
    with QuicxClient(address) as client:
        group = client.open_group()
        try:
            ids = _submit(df, evolve(plan, window=window, retry_for=retry_for, group=group))
        finally:
            client.close_group(group)
    return SubmittedGroup(ids, group, address)


def _plan(
    df: Any,
    address: str,
    key_column: str,
    task_type: str | None,
    type_column: str | None,
    payload_column: str | None,
) -> _Plan:
    """@raise ValueError: the columns are not there, or not one type source."""
    if (task_type is None) == (type_column is None):
        raise ValueError("give task_type or type_column, not both or neither")
    for column in (key_column, type_column, payload_column):
        if column is not None and column not in df.columns:
            raise ValueError(f"no column {column!r} in {df.columns}")
    return _Plan(address, key_column, task_type, type_column, payload_column, 1000, 600.0)


def _submit(df: Any, plan: _Plan) -> Any:
    """Submit C{df}'s rows from the executors, once; the (key, task_id) DataFrame."""
    from pyspark import StorageLevel
    from pyspark.sql.types import LongType, StructField, StructType

    use_this_python(df.sparkSession)
    schema = StructType(
        [df.schema[plan.key_column], StructField("task_id", LongType(), nullable=False)]
    )
    ids = df.sparkSession.createDataFrame(
        df.rdd.mapPartitions(lambda rows: submit_partition(plan, rows)), schema
    )
    ids.persist(StorageLevel.MEMORY_AND_DISK)
    ids.count()  # submit now, exactly once
    return ids


def submit_partition(plan: _Plan, rows: Iterable[Any]) -> Iterator[tuple[Any, int]]:
    """(On an executor.) Submit C{rows} over one connection; yield (key, task id)."""
    with QuicxClient(plan.address, keep_outcomes=0) as client:
        batch: list[tuple[Any, Task]] = []
        for row in rows:
            batch.append(_task_of(plan, row))
            if len(batch) == plan.window:
                yield from _submit_with_retry(client, plan, batch)
                batch = []
        if batch:
            yield from _submit_with_retry(client, plan, batch)


def _task_of(plan: _Plan, row: Any) -> tuple[Any, Task]:
    task_type = plan.task_type if plan.task_type is not None else row[plan.type_column]
    if plan.payload_column is None:
        payload = json.dumps(row.asDict(recursive=True), default=str).encode("utf-8")
    else:
        value = row[plan.payload_column]
        payload = value.encode("utf-8") if isinstance(value, str) else bytes(value or b"")
    key = row[plan.key_column]
    if plan.group is None:
        return key, (task_type, payload)
    return key, (task_type, payload, Options(group=plan.group, key=f"group-{plan.group}:{key}"))


def _submit_with_retry(
    client: QuicxClient, plan: _Plan, tasks: list[tuple[Any, Task]]
) -> Iterator[tuple[Any, int]]:
    delay, deadline = FIRST_BACKOFF, time.monotonic() + plan.retry_for
    while tasks:
        results = client.submit_many((task for _, task in tasks), return_exceptions=True)
        refused: list[tuple[Any, Task]] = []
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, QueueFull):
                refused.append(task)
            elif isinstance(result, DaemonError):
                raise result
            else:
                yield task[0], result
        tasks = refused
        if tasks:
            if time.monotonic() > deadline:
                raise QueueFull(
                    f"queue still full after {plan.retry_for:g} s; {len(tasks)} rows not sent"
                )
            time.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)
