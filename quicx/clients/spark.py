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

Exactly once: each row's SUBMIT carries the idempotency key
C{SUBMISSION:KEY}, its key column's value after the submission's id (a new
uuid per call, made on the driver, or the caller's C{submission=}).  A
Spark task retried after its executor died, or a partition recomputed,
sends its rows again and the daemon answers those it has as duplicates,
with their first ids: each row is one task, and the result has the id the
daemon kept.  This holds while the daemon remembers the keys (protocol
version 2; see docs/pipeline.md): a version-1 daemon is refused.

As a group, so a pipeline learns when the whole DataFrame has been
processed (protocol version 2):

    batch = submit_dataframe_group(orders, "tcp:queue.internal:16381",
                                   key_column="order_id", task_type="send_receipt")
    batch.ids.show()
    counts = batch.wait(timeout=3600)   # {"done": ..., "failed": ..., ...}

The driver opens the group, the executors submit into it, and the driver
closes it once every row is in.  The keys are then C{group-ID:KEY}.

The result is computed once, when this function runs, and kept
(C{MEMORY_AND_DISK}).  Spark recomputes a partition only if an executor
holding it is lost, and its rows are then answered as duplicates.

On a local master (C{local[*]} and the like), the executors run this
interpreter (C{sys.executable}) unless C{PYSPARK_PYTHON} names another: see
L{use_this_python}.

Needs C{pip install 'quicx[spark]'} (PySpark) and Java.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from attrs import evolve, frozen

import quicx
from quicx.clients.blocking import QuicxClient, Task
from quicx.clients.requests import CLIENT_NAME, Options
from quicx.protocol.errors import NeedsVersion2, QueueFull, QuicxError

FIRST_BACKOFF = 0.05
MAX_BACKOFF = 2.0
MAX_SUBMISSION = 64
"""The longest C{submission} id, in bytes: each key's prefix, with room for a hash."""
MIN_HASH = 32
"""The fewest hex digits (128 bits) of a long key's hash in its idempotency key."""


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
    prefix: str = ""
    """Each row's idempotency key is C{prefix:KEY}."""
    max_key: int = 255
    """The daemon's longest key, in bytes: longer keys are hashed."""
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
    submission: str | None = None,
) -> Any:
    """
    Submit one task per row of C{df}, exactly once; return a DataFrame of
    (key, task_id).

    @param key_column: the column that identifies a row, in the result and
        in its idempotency key: its values must be unique (rows with the
        same key are one task) and not null.
    @param task_type: the type of every task, or...
    @param type_column: ...the column holding each row's type.
    @param payload_column: a column of bytes or str; without it, each
        payload is the row as a JSON object.
    @param window: SUBMITs pipelined before reading their answers.
    @param retry_for: seconds to keep retrying rows refused as queue full.
    @param submission: this submission's id (1 to 64 bytes; default: a new
        uuid).  Give the same one to run the same job again (its driver
        died, say): the rows already submitted are answered as duplicates.
    @raise ValueError: the columns are not there, or not one type source, or
        C{submission} is empty, too long, holds a C{:} or begins
        C{group-} (two calls could then make the same keys).
    @raise NeedsVersion2: the daemon speaks protocol version 1, which has no
        idempotency keys.
    """
    plan = _plan(df, address, key_column, task_type, type_column, payload_column)
    if submission is None:
        submission = uuid.uuid4().hex
    if not 1 <= len(submission.encode("utf-8")) <= MAX_SUBMISSION:
        raise ValueError(f"a submission id is 1 to {MAX_SUBMISSION} bytes: {submission!r}")
    # Its keys are SUBMISSION:KEY: with a colon in it, or group-N (the keys
    # of submit_dataframe_group's rows), two calls could make the same keys.
    if ":" in submission or submission.startswith("group-"):
        raise ValueError(f"a submission id has no ':' and does not begin 'group-': {submission!r}")
    with QuicxClient(address) as client:
        try:
            client.hello(CLIENT_NAME, quicx.__version__, ("idempotency",))
        except NeedsVersion2:
            raise NeedsVersion2(
                f"{address} speaks protocol version 1 only, which has no idempotency keys:"
                " submit_dataframe could submit a row twice when Spark retries a task"
            ) from None
        max_key = _max_key(client)
    plan = evolve(plan, window=window, retry_for=retry_for, prefix=submission, max_key=max_key)
    return _submit(df, plan)


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
            ids = _submit(
                df,
                evolve(
                    plan,
                    window=window,
                    retry_for=retry_for,
                    prefix=f"group-{group}",
                    max_key=_max_key(client),
                    group=group,
                ),
            )
        finally:
            client.close_group(group)
    return SubmittedGroup(ids, group, address)


def _max_key(client: QuicxClient) -> int:
    """The longest idempotency key the daemon C{client} spoke with takes, in bytes."""
    limits: Any = client.server.get("limits", {})
    return int(limits.get("max_key_length", 255))


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
    return key, (task_type, payload, Options(group=plan.group, key=idempotency_key(plan, key)))


def idempotency_key(plan: _Plan, value: Any) -> str:
    """
    C{value}'s row's key: C{PREFIX:VALUE}, or C{PREFIX:#SHA256} of the
    value when that is longer than the daemon takes (the SHA-256's hex cut to
    fit, but never below L{MIN_HASH} digits).

    @raise ValueError: C{value} is null, or too long for a daemon whose
        C{max_key_length} leaves no room for its hash after the prefix.
    """
    if value is None:
        raise ValueError(f"a row's {plan.key_column!r} is null: each row needs a key")
    key = f"{plan.prefix}:{value}"
    if len(key.encode("utf-8")) <= plan.max_key:
        return key
    room = plan.max_key - len(plan.prefix.encode("utf-8")) - 2
    if room < MIN_HASH:
        raise ValueError(
            f"a {plan.key_column!r} of {len(key.encode('utf-8'))} bytes with its prefix is"
            f" over the daemon's max_key_length ({plan.max_key}), which leaves no room for"
            f" its hash ({MIN_HASH} digits) after {plan.prefix!r}"
        )
    digest = hashlib.sha256(str(value).encode("utf-8")).hexdigest()
    return f"{plan.prefix}:#{digest[:room]}"


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
            elif isinstance(result, QuicxError):
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
