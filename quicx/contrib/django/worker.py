"""
The worker of Django tasks: a L{Worker} whose one handler imports each task by its path and runs it.

C{quicx worker --django [ALIAS]} runs it: Django is set up from
C{$DJANGO_SETTINGS_MODULE}, the worker serves the backend's C{QUEUES} in
their order, and each task runs in a thread of the worker's pool (sync or
async, as C{Task.call} runs it), between two C{close_old_connections()}, as
Django does around a request.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from typing import Any

import django
from django.db import close_old_connections
from django.utils import timezone
from django.utils.module_loading import import_string

from quicx.clients.worker import TaskContext as QuicxContext
from quicx.clients.worker import Unrecoverable, Worker
from quicx.contrib.django import codec
from quicx.contrib.django.backend import QuicxBackend
from quicx.contrib.django.compat import (
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)


def django_worker(alias: str = "default") -> tuple[Worker, str | None]:
    """
    Django set up, and a worker of the tasks of backend C{alias} (a
    L{QuicxBackend}), with the backend's C{ADDRESS} (C{None}: not given).

    @raise ValueError: no settings module, or C{alias} is not a Quicx backend.
    """
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ValueError("--django needs DJANGO_SETTINGS_MODULE (the settings, as manage.py sets)")
    django.setup()
    try:
        backend = task_backends[alias]
    except Exception as e:  # InvalidTaskBackend, or the backend's own ImproperlyConfigured
        raise ValueError(f"TASKS[{alias!r}]: {e}") from None
    if not isinstance(backend, QuicxBackend):
        raise ValueError(f"TASKS[{alias!r}] is a {type(backend).__name__}, not a QuicxBackend")
    worker = Worker(queues=backend.queue_order)
    worker.register(codec.TASK_TYPE, Runner(alias).run, thread=True)
    return worker, backend.address


class Runner:
    """
    Runs one Django task a call, in a thread of the worker's pool.

    @ivar worker_id: this process, as Django's C{TaskResult.worker_ids} names it.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"

    def run(self, payload: bytes, context: QuicxContext) -> dict[str, Any]:
        """
        Run the task C{payload} names; return the L{codec} envelope of its
        return value.  What it raises fails the Quicx task (retried as the
        queue or the backend's C{RETRIES} say).

        @raise Unrecoverable: the payload is not a Django task's, or names
            no task: no retry would help.
        """
        try:
            path, args, kwargs = codec.decode_payload(payload)
            task = import_string(path)
        except (ValueError, ImportError) as e:
            raise Unrecoverable(f"not a Django task: {e}") from None
        if not isinstance(task, Task):
            raise Unrecoverable(f"{path} is a {type(task).__name__}, not a Django task")
        started = time.time()
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=codec.result_id(path, context.task_id),
            status=TaskResultStatus("RUNNING"),
            enqueued_at=codec.moment(context.enqueued_at),
            started_at=timezone.now(),
            finished_at=None,
            last_attempted_at=timezone.now(),
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[self.worker_id] * context.attempt,
        )
        close_old_connections()
        try:
            value = self._call(task, result, args, kwargs)
        finally:
            close_old_connections()
        return {
            "value": value,
            "enqueued_at": context.enqueued_at,
            "started_at": started,
            "finished_at": time.time(),
            "attempt": context.attempt,
            "worker": self.worker_id,
        }

    @staticmethod
    def _call(
        task: Task[Any, Any], result: TaskResult[Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        """Run C{task}, sending Django's started and finished signals; its JSON return value."""
        sender = type(task.get_backend())
        task_started.send(sender, task_result=result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            value = normalize_json(value)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            kind = type(e)
            error = TaskError(
                exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                traceback="".join(traceback.format_exception(e)),
            )
            result.errors.append(error)
            object.__setattr__(result, "status", TaskResultStatus("FAILED"))
            object.__setattr__(result, "finished_at", timezone.now())
            task_finished.send(sender, task_result=result)  # in the except: logged with it
            raise
        object.__setattr__(result, "status", TaskResultStatus("SUCCESSFUL"))
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "_return_value", value)
        task_finished.send(sender, task_result=result)
        return value
