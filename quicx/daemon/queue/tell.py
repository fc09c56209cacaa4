"""
Telling a session a task's outcome as its producer hears it: DONE, FAILED or CANCELLED.

An expired task's producer hears OUTCOME I{expired} (version 1: FAILED).
"""

from __future__ import annotations

from quicx.daemon.queue.model import Session
from quicx.daemon.queue.results import KeptOutcome
from quicx.protocol import taskflow
from quicx.protocol.outcomes import OutcomeState


def tell_outcome(
    session: Session,
    task_id: int,
    outcome: str,
    reason: str,
    result: taskflow.Result | None = None,
) -> None:
    """
    Send C{session} a task's outcome in its version (a version-1 peer
    hears a cancel as FAILED C{cancelled}, and no result; an expiry as
    FAILED C{reason}, where version 2 hears OUTCOME I{expired}); C{reason}:
    a failure's, verbatim.
    """
    if not session.connected:
        return
    speaker = session.speaker
    if outcome == "done":
        frame = speaker.done(task_id) if result is None else speaker.done_with(task_id, result)
    elif outcome == "cancelled":
        frame = speaker.cancelled(task_id)
    elif outcome == "expired" and speaker.version != 1:
        frame = speaker.outcome(task_id, OutcomeState.EXPIRED, None, reason)
    else:
        frame = speaker.failed(task_id, reason)
    session.peer.sendFrame(frame)


def tell_kept(session: Session, kept: KeptOutcome, data: bytes) -> None:
    """Send C{session} a kept outcome as its task's producer would have heard it."""
    state = kept.state
    if state == OutcomeState.DONE:
        result = taskflow.Result(taskflow.ResultKind(kept.kind), data) if kept.kind else None
        tell_outcome(session, kept.task_id, "done", "", result)
    elif state == OutcomeState.CANCELLED:
        tell_outcome(session, kept.task_id, "cancelled", "")
    elif state == OutcomeState.EXPIRED:
        tell_outcome(session, kept.task_id, "expired", data.decode("utf-8", "replace"))
    else:
        tell_outcome(session, kept.task_id, "failed", data.decode("utf-8", "replace"))
