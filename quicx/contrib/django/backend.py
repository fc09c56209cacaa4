"""
L{QuicxBackend}: Django's Tasks framework enqueues to Quicx, and reads results from it.

Each C{enqueue} is one SUBMIT on a blocking client of this thread (one
connection per thread and process, kept open), keeping the task's outcome
(C{keep_result}) so that C{get_result} reads it from any process.  See
docs/integrations.md for the options and what each feature maps to.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from quicx.clients.blocking import QuicxClient
from quicx.clients.blocking_cluster import ClusterClient, open_client
from quicx.contrib.django import codec
from quicx.contrib.django.compat import (
    BaseTaskBackend,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from quicx.protocol.errors import (
    NotFinished,
    NotFound,
    OutcomeForgotten,
    TaskCancelled,
    TaskFailed,
    TaskUnknown,
)

OPTIONS = {
    "ADDRESS": "the daemon, or a comma-separated list of daemons (default $QUICX_ADDRESS)",
    "TIMEOUT": "seconds a call to the daemon may take (default 30)",
    "RESULT_TTL": "how long the daemon keeps each outcome (default its [results] ttl)",
    "RETRIES": "how many times a failed task is retried (default: the queue's)",
    "BACKOFF": "the wait before each retry, as fixed:WAIT or exponential:BASE:CAP",
}
"""The backend's C{OPTIONS}, with what each means."""

Client = QuicxClient | ClusterClient

_local = threading.local()


class QuicxBackend(BaseTaskBackend):
    """
    Enqueues Django tasks to Quicx: C{TASKS = {"default": {"BACKEND":
    "quicx.contrib.django.QuicxBackend", "QUEUES": [...], "OPTIONS": {...}}}}.

    @ivar queue_order: C{QUEUES} as listed (the worker serves them in this order).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.queue_order: list[str] = list(dict.fromkeys(params.get("QUEUES", ["default"])))
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}] OPTIONS has unknown keys {', '.join(unknown)}"
                f" (QuicxBackend takes {', '.join(OPTIONS)})"
            )
        self.address: str | None = self.options.get("ADDRESS")
        self.timeout = float(self.options.get("TIMEOUT", 30.0))
        self.submit_options: dict[str, Any] = {"keep_result": True}
        for option, name in (
            ("RESULT_TTL", "result_ttl"),
            ("RETRIES", "retries"),
            ("BACKOFF", "backoff"),
        ):
            if option in self.options:
                self.submit_options[name] = self.options[option]

    def client(self) -> Client:
        """This thread's client of the daemon(s), connected on first use."""
        address = self.address or os.environ.get("QUICX_ADDRESS")
        key = (os.getpid(), address, self.timeout)
        clients: dict[tuple[int, str | None, float], Client] = _local.__dict__.setdefault(
            "clients", {}
        )
        found = clients.get(key)
        if found is None:
            # No outcome is waited for here (get_result asks for kept ones):
            # none is kept on the connection.
            found = clients[key] = open_client(address, self.timeout, keep_outcomes=0)
        return found

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Submit C{task} with C{args} and C{kwargs} (made JSON by Django's C{TaskResult})."""
        self.validate_task(task)
        result: TaskResult[Any] = TaskResult(
            task=task,
            id="",
            status=TaskResultStatus("READY"),
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        payload = codec.encode_payload(task.module_path, result.args, result.kwargs)
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):
            run_at = timezone.make_aware(run_at)  # USE_TZ = False: the current zone's time
        ref = self.client().submit(
            codec.TASK_TYPE,
            payload,
            queue=task.queue_name,
            priority=codec.quicx_priority(task.priority),
            run_at=run_at,
            **self.submit_options,
        )
        object.__setattr__(result, "id", codec.result_id(task.module_path, ref))
        object.__setattr__(result, "enqueued_at", timezone.now())
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """L{enqueue} in a thread of the executor's (each with its client), not the main one."""
        return await sync_to_async(self.enqueue, thread_sensitive=False)(task, args, kwargs)

    def get_result(self, result_id: str) -> TaskResult:
        """
        The task's result now: SUCCESSFUL or FAILED from its kept outcome,
        else READY (queued or delayed) or RUNNING.

        @raise TaskResultDoesNotExist: no such task, or its outcome is
            forgotten (its C{RESULT_TTL} ran out).
        """
        try:
            path, ref = codec.parse_result_id(result_id)
            task = import_string(path)
        except (ValueError, ImportError) as e:
            raise TaskResultDoesNotExist(str(e)) from None
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(f"{path} is not a task")
        client = self.client()
        if isinstance(ref, str) and not isinstance(client, ClusterClient):
            raise TaskResultDoesNotExist(
                f"{result_id}: a task ref, and this backend has one daemon"
            )
        try:
            return self._result(client, task, result_id, ref)
        except (OutcomeForgotten, TaskUnknown, NotFound, ValueError) as e:
            raise TaskResultDoesNotExist(f"{result_id}: {e}") from None

    async def aget_result(self, result_id: str) -> TaskResult:
        """L{get_result} in a thread of the executor's."""
        return await sync_to_async(self.get_result, thread_sensitive=False)(result_id)

    def _result(self, client: Client, task: Task, result_id: str, ref: Any) -> TaskResult:
        known = {"task": task, "id": result_id, "backend": self.alias}
        made: Callable[..., TaskResult] = partial(_task_result, known)
        for _ in range(2):  # a task that finishes between the two questions: ask again
            try:
                envelope = client.result(ref, timeout=0)
            except TaskFailed as failed:
                return made(TaskResultStatus("FAILED"), errors=[codec.task_error(failed.reason)])
            except TaskCancelled as cancelled:
                error = TaskError(
                    exception_class_path="quicx.TaskCancelled",
                    traceback=f"quicx.TaskCancelled: {cancelled}\n",
                )
                return made(TaskResultStatus("FAILED"), errors=[error])
            except NotFinished:
                try:
                    state = client.task(ref)
                except NotFound:
                    continue
                running = state.get("state") == "running"
                return made(
                    TaskResultStatus("RUNNING" if running else "READY"),
                    task=task.using(
                        priority=codec.django_priority(state.get("priority", 100)),
                        queue_name=state.get("queue"),
                    ),
                )
            return _finished(made, envelope)
        raise TaskUnknown(ref)


def _finished(made: Callable[..., TaskResult], envelope: Any) -> TaskResult:
    """A SUCCESSFUL result from what the worker returned (L{codec} envelope)."""
    if not isinstance(envelope, dict) or "value" not in envelope:
        raise ValueError("its result is not a Django task's (no envelope)")
    attempt = int(envelope.get("attempt", 1))
    result = made(
        TaskResultStatus("SUCCESSFUL"),
        enqueued_at=codec.moment(envelope.get("enqueued_at")),
        started_at=codec.moment(envelope.get("started_at")),
        finished_at=codec.moment(envelope.get("finished_at")),
        last_attempted_at=codec.moment(envelope.get("started_at")),
        worker_ids=[str(envelope.get("worker", ""))] * attempt,
    )
    object.__setattr__(result, "_return_value", envelope["value"])
    return result


def _task_result(known: dict[str, Any], status: TaskResultStatus, **fields: Any) -> TaskResult:
    """
    A result read back: its args and kwargs are not (the daemon keeps the
    outcome, not the arguments), see docs/integrations.md.
    """
    values: dict[str, Any] = {
        **known,
        "status": status,
        "enqueued_at": None,
        "started_at": None,
        "finished_at": None,
        "last_attempted_at": None,
        "args": [],
        "kwargs": {},
        "errors": [],
        "worker_ids": [],
    }
    values.update(fields)
    return TaskResult(**values)


def enqueue_on_commit(task: Task, *args: Any, using: str | None = None, **kwargs: Any) -> None:
    """
    Enqueue C{task} once the current transaction of database C{using}
    commits (at once outside one; never if it rolls back), as Django's
    documentation has it: C{transaction.on_commit(partial(task.enqueue, ...))}.
    """
    transaction.on_commit(partial(task.enqueue, *args, **kwargs), using=using)


__all__ = ["OPTIONS", "QuicxBackend", "enqueue_on_commit"]
