"""
The telemetry's counts of what befell the tasks, heard from the kernel's hooks.

L{Counting} implements the hooks (see L{quicx.daemon.queue.hooks.Subscribers})
that count in a task's L{Tally} and the refusals by code.  A deliberate
exception: the three counts every task makes on the hot path (submitted,
ran, done) stay inline in the kernel, where a hook call would cost each
task a Python call: 35 to 45 ns each, about 0.1 us of the daemon's 8 us per
task for the three (1.3 %; measured with timeit on CPython 3.11).
"""

from __future__ import annotations

from quicx.daemon.observe.telemetry import Telemetry
from quicx.daemon.queue.model import Session, Task
from quicx.protocol.codec import ErrorCode


class Counting:
    """The counts in C{telemetry}."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def retrying(
        self, task: Task, worker: Session | None, reason: str, attempt: int | None
    ) -> None:
        task.tally.retried += 1

    def requeued(self, task: Task, cause: str) -> None:
        task.tally.requeued += 1

    def failed(self, task: Task, worker: Session | None, reason: str, attempt: int | None) -> None:
        task.tally.failed += 1

    def buried(self, task: Task, worker: Session | None, reason: str, attempt: int | None) -> None:
        task.tally.dead += 1

    def cancelled(self, task: Task, why: str) -> None:
        task.tally.cancelled += 1

    def expired(self, task: Task, why: str) -> None:
        task.tally.expired += 1

    def debounced(self, task: Task, mode: str) -> None:
        task.tally.debounced += 1

    def rejected(
        self, session: Session | None, code: ErrorCode, reason: str, task_type: bytes, size: int
    ) -> None:
        self.telemetry.rejected[code.name.lower()] += 1
