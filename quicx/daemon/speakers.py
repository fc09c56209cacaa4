"""
The two speakers: version 1's and version 2's replies, one chosen per connection at its first frame.

The queue kernel sends frames only through a session's
L{quicx.daemon.queue.speaker.Speaker}; this is the one place that maps its
replies onto the encoders of L{quicx.protocol}.  Each attribute is a plain
function (no bound method, no branch), so a reply costs what the encoder
costs.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import frozen

from quicx.daemon.queue.extras import NO_EXTRAS
from quicx.daemon.queue.speaker import Delivered
from quicx.protocol import admin, codec, link, outcomes, taskflow, wire
from quicx.protocol.outcomes import GroupState, OutcomeState
from quicx.protocol.taskflow import Result


@frozen
class _Speaker:
    """A L{quicx.daemon.queue.speaker.Speaker} made of functions."""

    version: int
    fenced: bool
    hears_lifecycle: bool
    claims_outcomes: bool
    wait: bytes
    heartbeat: bytes
    ok: Callable[[int], bytes]
    duplicate_ok: Callable[[int], bytes]
    error: Callable[[int, str], bytes]
    done: Callable[[int], bytes]
    done_with: Callable[[int, Result], bytes]
    failed: Callable[[int, str], bytes]
    cancelled: Callable[[int], bytes]
    delivery: Callable[[Delivered, bytes, bytes, float], bytes]
    task: Callable[[int, bytes, bytes], bytes]
    retrying: Callable[[int, int, int, str], bytes]
    progress: Callable[[int, int, int, str], bytes]
    outcome: Callable[[int, OutcomeState, Result | None, str | bytes], bytes]
    group_state: Callable[[GroupState], bytes]


def _duplicate_ok_v2(task_id: int) -> bytes:
    return taskflow.encode_ok(task_id, True)


def _done_with_v1(task_id: int, result: Result) -> bytes:
    # Version 1's DONE carries no result.
    return wire.encode_done(task_id)


def _cancelled_v1(task_id: int) -> bytes:
    # Version 1 has no CANCELLED: a cancel is FAILED "cancelled".
    return wire.encode_failed(task_id, "cancelled")


def _delivery_v2(task: Delivered, payload: bytes, queue_header: bytes, timeout: float) -> bytes:
    extras = task.extras or NO_EXTRAS  # its rare fields, read once
    saved = extras.checkpoint
    return taskflow.encode_delivery(
        task.task_id,
        task.task_type,
        payload,
        queue_header,
        task.priority,
        task.attempts,
        int(task.enqueued_at * 1000),
        extras.key,
        extras.fairness,
        task.token,
        int(timeout * 1000),
        extras.failures,
        # task.retries (extras.Retries's rule), read here without the
        # descriptor's call: 470 instructions a version-2 delivery.
        task.home.policy.retries if extras.retries is None else extras.retries,
        extras.trace,
        None if saved is None else saved.state,
        extras.parents,
    )


def _unheard(*_: object) -> bytes:
    raise AssertionError("a version-1 peer hears no RETRYING, PROGRESS, OUTCOME or GROUP_STATE")


def _unfenced(*_: object) -> bytes:
    raise AssertionError("a version-2 delivery is fenced; a version-1 one is not")


V1 = _Speaker(
    version=wire.PROTOCOL_VERSION,
    fenced=False,
    hears_lifecycle=False,
    claims_outcomes=False,
    wait=wire.WAIT_FRAME,
    heartbeat=wire.HEARTBEAT_FRAME,
    ok=wire.encode_ok,
    duplicate_ok=wire.encode_ok,
    error=wire.encode_error,
    done=wire.encode_done,
    done_with=_done_with_v1,
    failed=wire.encode_failed,
    cancelled=_cancelled_v1,
    # No fencing, no queue, no context: the id, the type, the payload.
    delivery=_unfenced,
    task=wire.encode_task,
    retrying=_unheard,
    progress=_unheard,
    outcome=_unheard,
    group_state=_unheard,
)
"""Version 1, the protocol page's: no fencing, no lifecycle, nothing kept for it."""

V2 = _Speaker(
    version=codec.VERSION,
    fenced=True,
    hears_lifecycle=True,
    claims_outcomes=True,
    wait=taskflow.WAIT_FRAME,
    heartbeat=link.HEARTBEAT_FRAME,
    ok=taskflow.encode_ok,
    duplicate_ok=_duplicate_ok_v2,
    error=link.encode_error,
    done=taskflow.encode_done,
    done_with=taskflow.encode_done,
    failed=taskflow.encode_failed,
    cancelled=admin.encode_cancelled,
    delivery=_delivery_v2,
    task=_unfenced,
    retrying=outcomes.encode_retrying,
    progress=outcomes.encode_progress,
    outcome=outcomes.encode_outcome,
    group_state=outcomes.encode_group_state,
)
"""Version 2: fenced deliveries, RETRYING and PROGRESS, outcomes kept and claimed."""

SPEAKERS = {V1.version: V1, V2.version: V2}
"""The speaker of each protocol version."""
