"""
Workers' PROGRESS reports: checked, kept in the progress book, sent on to producers and events.

L{ProgressReports} is handed the kernel (L{IKernel}) and never imports it;
it hears the kernel's C{output_drained} hook (see
L{quicx.daemon.queue.hooks.Subscribers}) to send the reports held back.
"""

from __future__ import annotations

from collections.abc import Callable

from quicx.daemon.queue.hooks import record
from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Session, Task
from quicx.daemon.queue.policy import ProgressSettings
from quicx.daemon.queue.progress import ProgressBook, Report
from quicx.daemon.queue.state import DEAD
from quicx.protocol.outcomes import MAX_FRACTION
from quicx.protocol.session import ProtocolViolation

Delivery = Callable[[Session, int, int, str], Task]


class ProgressReports:
    """
    @ivar book: the tasks' last reports, paced (see L{ProgressBook}).
    """

    def __init__(self, kernel: IKernel, settings: ProgressSettings, delivery: Delivery) -> None:
        self.kernel = kernel
        self._delivery = delivery
        self.book: ProgressBook[Task] = ProgressBook(
            kernel.scheduler, kernel.clock, settings, self._out
        )

    def report(
        self, session: Session, task_id: int, token: int, fraction: int, message: str
    ) -> None:
        """
        A worker's PROGRESS for delivery C{token}: the task's last report,
        sent on to its producer (if it asked) and the events log, at most
        one per C{[progress] interval}.

        @raise Refused: (stale) the delivery is not the task's current one.
        @raise ProtocolViolation: C{session} was never sent C{task_id}, or
            the message is longer than C{max_message}.
        """
        task = self._delivery(session, task_id, token, "PROGRESS")
        limit = self.book.settings.max_message
        size = len(message.encode("utf-8"))
        if size > limit:
            raise ProtocolViolation(
                f"PROGRESS message of {size} bytes exceeds [progress] max_message ({limit})"
            )
        self.book.report(
            task, token, fraction, message, task.forward_progress or self.kernel.events is not None
        )

    def _out(self, task: Task, report: Report) -> None:
        """(The progress book.) A report of C{task}'s goes out."""
        events = self.kernel.events
        if events is not None:
            record(
                events,
                "progress",
                task,
                task.holder,
                (report.fraction / MAX_FRACTION, report.message),
            )
        producer = task.producer
        if (
            task.forward_progress
            and producer is not None
            and producer.connected
            and producer.speaker.hears_lifecycle
        ):
            frame = producer.speaker.progress(
                task.task_id, report.token, report.fraction, report.message
            )
            if producer.paused:
                # Its output is backed up: keep the latest of each task, not a backlog.
                if producer.held_progress.pop(task.task_id, None) is not None:
                    self.book.coalesced += 1
                producer.held_progress[task.task_id] = frame
            else:
                producer.peer.sendFrame(frame)

    def output_drained(self, session: Session) -> None:
        """
        (A kernel hook.) C{session} gets the progress held meanwhile, of
        tasks not yet finished (an outcome supersedes it).
        """
        if session.held_progress:
            held, session.held_progress = session.held_progress, {}
            live = self.kernel._live
            for task_id, frame in held.items():
                task = live.get(task_id)
                if task is not None and task.state is not DEAD:
                    session.peer.sendFrame(frame)
