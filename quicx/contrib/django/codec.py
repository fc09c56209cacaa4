"""
What a Django task becomes on the wire: its Quicx task, priority, result id and outcome.

- The task type is L{TASK_TYPE} for every Django task; the payload is JSON,
  C{{"task": MODULE_PATH, "args": [...], "kwargs": {...}}}.
- Django's priorities, -100 to 100, are Quicx's 0 to 200: C{quicx = django
  + 100}, one to one and in order (Django's default, 0, is Quicx's 100).
- A result id is C{MODULE_PATH:REF}: the task's path, and its Quicx id (or
  its task ref, C{ID@ADDRESS}, with several daemons).
- What the worker returns is an envelope, C{{"value": RETURN_VALUE,
  "enqueued_at", "started_at", "finished_at": UNIX_SECONDS, "attempt": N,
  "worker": ID}}; a failure is the worker's reason, whose first line is the
  exception's class path and message.
"""

from __future__ import annotations

import builtins
import json
import re
from datetime import UTC, datetime
from typing import Any

from quicx.contrib.django.compat import TaskError

TASK_TYPE = "django"
"""The Quicx task type of every Django task (C{quicx events --type django})."""

PRIORITY_OFFSET = 100
"""Django's priority plus this is Quicx's: -100..100 onto 0..200."""

_TRACEBACK = "Traceback (most recent call last):"
_CLASS_PATH = re.compile(r"[A-Za-z_][\w.]*")


def quicx_priority(priority: int) -> int:
    """Django's priority (-100 to 100) as Quicx's (0 to 200)."""
    return priority + PRIORITY_OFFSET


def django_priority(priority: int) -> int:
    """Quicx's priority as Django's, cut to Django's range."""
    return max(-PRIORITY_OFFSET, min(PRIORITY_OFFSET, priority - PRIORITY_OFFSET))


def encode_payload(module_path: str, args: list[Any], kwargs: dict[str, Any]) -> bytes:
    """
    The task's payload: JSON of its path and its arguments (already
    normalized by Django's C{TaskResult}).

    @raise ValueError: a float that JSON cannot hold (NaN, infinity).
    """
    message = {"task": module_path, "args": args, "kwargs": kwargs}
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()


def decode_payload(payload: bytes) -> tuple[str, list[Any], dict[str, Any]]:
    """
    The path, args and kwargs of a payload L{encode_payload} wrote.

    @raise ValueError: not such a payload.
    """
    message = json.loads(payload)
    if not isinstance(message, dict):
        raise ValueError("a Django task's payload is a JSON object")
    path, args, kwargs = message.get("task"), message.get("args"), message.get("kwargs")
    if not isinstance(path, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError('a Django task\'s payload has "task", "args" and "kwargs"')
    return path, args, kwargs


def result_id(module_path: str, ref: object) -> str:
    """The result id of task C{ref} (an id, or a task ref) of C{module_path}."""
    return f"{module_path}:{ref}"


def parse_result_id(text: str) -> tuple[str, int | str]:
    """
    The module path and the Quicx id (an C{int}, or a task ref's text) of a result id.

    @raise ValueError: not a result id.
    """
    path, colon, ref = text.partition(":")
    if not colon or not _CLASS_PATH.fullmatch(path) or not ref:
        raise ValueError(f"{text!r} is not a Quicx result id (MODULE_PATH:ID)")
    return path, int(ref) if ref.isdigit() else ref


def moment(seconds: float | None) -> datetime | None:
    """Unix seconds as an aware datetime (UTC)."""
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def task_error(reason: str) -> TaskError:
    """
    Django's C{TaskError} for a Quicx worker's failure reason: its first
    line is C{PATH: MESSAGE} as Python prints an exception (a builtin
    without its module), then, if it fitted, its traceback.  A reason that
    names no exception class (the worker could not run the task) is a
    C{quicx.TaskFailed}.
    """
    head, _, body = reason.partition("\n" + _TRACEBACK)
    name = head.split("\n", 1)[0].split(":", 1)[0].strip()
    if "." not in name and _builtin_exception(name):
        path = f"builtins.{name}"
    elif "." in name and _CLASS_PATH.fullmatch(name):
        path = name
    else:
        path, head = "quicx.TaskFailed", f"quicx.TaskFailed: {head}"
    traceback = f"{_TRACEBACK}{body}\n{head}\n" if body else f"{head}\n"
    return TaskError(exception_class_path=path, traceback=traceback)


def _builtin_exception(name: str) -> bool:
    found = getattr(builtins, name, None)
    return isinstance(found, type) and issubclass(found, BaseException)
