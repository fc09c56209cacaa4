"""
How a worker reports a task's outcome: ACK or NACK, DONE or FAILED, and the reason.

A failure's reason says what went wrong in its first line, then where: the
traceback, as Python prints it, cut to what the daemon takes (the last
frames kept, the worker's own callers left out).
"""

from __future__ import annotations

import importlib.util
import os
import traceback
from collections.abc import Sequence
from typing import Any, Protocol, cast

from attrs import frozen

from quicx.protocol import outcomes, taskflow, wire


def _callers() -> tuple[str, ...]:
    """
    Where the frames that call a handler are (L{quicx.clients.handlers}, and
    Twisted's threads and Deferreds), found without importing Twisted.
    """
    spec = importlib.util.find_spec("twisted")
    twisted = list(spec.submodule_search_locations or []) if spec is not None else []
    handlers = os.path.join(os.path.dirname(__file__), "handlers.py")
    return (handlers, *(directory + os.sep for directory in twisted))


CALLERS = _callers()
"""Where the frames that call a handler are: left out of a failure's traceback."""


class Failed(Protocol):
    """
    A handler's failure: Twisted's C{Failure}, or L{Raised} (the asyncio
    worker's): its exception, and the frames it was raised through, each
    C{(function, file, line, ...)}.
    """

    @property
    def value(self) -> BaseException | None: ...

    @property
    def frames(self) -> Sequence[Sequence[Any]]: ...


@frozen
class Raised:
    """An exception as a L{Failed}: the frames of its traceback, but the first C{skip}."""

    value: BaseException
    frames: list[tuple[str, str, int]]

    @classmethod
    def of(cls, error: BaseException, skip: int = 0) -> Raised:
        frames = traceback.extract_tb(error.__traceback__)[skip:]
        return cls(error, [(f.name, f.filename, f.lineno or 0) for f in frames])


class Unrecoverable(Exception):
    """
    Raised by a handler: the task failed, and running it again would not
    help (a malformed payload, a refused card).  A version-2 worker reports
    it with NACK's permanent flag, so the daemon does not retry it (it goes
    to the dead-letter set if it had retries); to a daemon without leases it
    is a plain failure.  Its message is the reason.
    """


MAX_REASON = 1024
"""FAILED reasons are cut to this many bytes unless the daemon says how many
it takes (C{max_reason} in its answer to HELLO): the daemon's default
max_reason_length, which refuses longer ones."""

MAX_LOGGED_REASON = 16 * 1024
"""The most of a failure the worker's log line shows: more than it sends."""

_TRACEBACK = "Traceback (most recent call last):\n"


def cut_reason(reason: str, limit: int = MAX_REASON) -> str:
    """C{reason}, cut to C{limit} bytes."""
    # "replace": a message may hold lone surrogates (os.fsdecode of a bad name).
    encoded = reason.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return encoded.decode("utf-8")
    return encoded[: max(0, limit - 3)].decode("utf-8", "ignore") + "..."[: max(0, limit)]


def failure_reason(failure: Failed, limit: int = MAX_REASON) -> str:
    """
    The FAILED reason for a handler's exception, at most C{limit} bytes: a
    first line that says what went wrong, C{KeyError: 'missing'} (an
    L{Unrecoverable}'s message alone), then, where the exception was raised
    (not made by the worker itself), its traceback, as Python prints it
    without the exception's line, cut to what fits: the last frames, where
    it was raised, are kept, and the handler's callers in this module left
    out.
    """
    error = failure.value
    assert error is not None  # a Failure always holds its exception
    raised, start = failure.frames, 0
    while start < len(raised) and raised[start][1].startswith(CALLERS):
        start += 1
    frames = raised[start:]
    if isinstance(error, Unrecoverable) or not raised:
        first = str(error) or type(error).__name__
    else:
        first = "".join(traceback.format_exception_only(type(error), error)).rstrip("\n")
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    if cause is not None:
        first += "\n(from " + "".join(traceback.format_exception_only(type(cause), cause))
        first = first.rstrip("\n") + ")"
    head = cut_reason(first, limit)
    room = limit - len(head.encode("utf-8")) - 1 - len(_TRACEBACK)
    if not frames or room <= 0:
        return head
    # Frame by frame, the last first, until the room is spent: not the
    # summary's own format(), which folds repeated lines (a recursion) into one.
    stack = traceback.StackSummary.from_list([(f[1], f[2], f[0], None) for f in frames])
    kept: list[str] = []
    for frame in reversed(stack):
        text = stack.format_frame_summary(frame)
        cut = len(stack) - len(kept) - 1
        note = f"  ... ({cut} earlier frame{'' if cut == 1 else 's'} cut)\n" if cut else ""
        size = len(text.encode("utf-8", "replace"))
        if size + len(note) > room:
            break
        kept.append(text)
        room -= size
    if not kept:
        return head
    cut = len(stack) - len(kept)
    if cut:
        kept.append(f"  ... ({cut} earlier frame{'' if cut == 1 else 's'} cut)\n")
    body = (_TRACEBACK + "".join(reversed(kept))).rstrip("\n")
    return head + "\n" + body.encode("utf-8", "replace").decode("utf-8")


def report(
    task: wire.Task | taskflow.Task,
    result: object,
    max_result: int | None = None,
    results: bool = True,
    max_reason: int = MAX_REASON,
    failed: bool = False,
) -> bytes:
    """
    The frame that reports C{task}'s outcome, C{result} (the handler's
    return value for done; with C{failed}, its L{Failed}): ACK or NACK quoting the delivery's
    token (NACK permanent for L{Unrecoverable}); DONE or FAILED to a daemon
    that gave no token (version 1, or version 2 without leases), which
    takes no result.

    @param max_result: the largest result the daemon takes, in bytes, if known.
    @param results: whether the daemon takes results (else the ACK has none).
    @param max_reason: the longest reason the daemon takes, in bytes.
    """
    if isinstance(task, taskflow.Task) and task.token:
        task_id, token = task.task_id, task.token
        if failed:
            permanent = isinstance(cast(Failed, result).value, Unrecoverable)
            reason = failure_reason(cast(Failed, result), max_reason)
            return outcomes.encode_nack(task_id, token, reason, permanent)
        if result is None or not results:
            return outcomes.encode_ack(task_id, token)
        # A result that cannot be sent would not be one on a retry either.
        try:
            value = taskflow.Result.of(result)
        except TypeError as e:
            return outcomes.encode_nack(task_id, token, cut_reason(f"no result: {e}"), True)
        if max_result is not None and len(value.data) > max_result:
            reason = (
                f"the result is {len(value.data):,} bytes, more than the daemon takes"
                f" ({max_result:,}: the daemon's [results] max_size, or its largest"
                " [allocator] class if that is smaller)"
            )
            return outcomes.encode_nack(task_id, token, reason, permanent=True)
        return outcomes.encode_ack(task_id, token, value)
    spoken = taskflow if isinstance(task, taskflow.Task) else wire
    if failed:
        return spoken.encode_failed(task.task_id, failure_reason(cast(Failed, result), max_reason))
    return spoken.encode_done(task.task_id)
