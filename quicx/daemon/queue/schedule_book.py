"""
The daemon's schedules as a service: firing, journal records, SCHEDULE and UNSCHEDULE.

The daemon's schedules as a service: the L{Scheduler} firing into the
queue, the schedules' journal records, and the admin's SCHEDULE and
UNSCHEDULE.

Declared schedules (C{[schedule NAME]}) come from the configuration; run-time
ones from the journal, which keeps each one's SCHEDULE payload until it is
removed, and every schedule's last fire time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.schedules import Scheduler, ScheduleSpec, TooManySchedules, UnknownSchedule
from quicx.net.twisted_types import Service
from quicx.protocol import admin
from quicx.protocol.codec import ErrorCode, MalformedMessage


class ScheduleBook(Service):
    """
    Started after the queue it fires into (it fires the firings missed while
    the daemon was down as it starts), stopped before it.
    """

    log = Logger()

    def __init__(
        self,
        queue: QueueService,
        reactor: IReactorTime,
        declared: Mapping[str, ScheduleSpec],
        max_schedules: int,
    ) -> None:
        self.queue = queue
        self.admission = Admission(queue)
        self.scheduler = Scheduler(reactor, self._fire, max_schedules)
        self._definitions: dict[str, bytes] = {}
        self._declared = declared

    def restore(self, fired: Mapping[str, float], definitions: Mapping[str, bytes]) -> None:
        """Add the declared schedules, then the run-time ones the journal kept, with last fires."""
        for name, spec in self._declared.items():
            self.scheduler.add(spec, fired.get(name))
        for name, payload in definitions.items():
            if name in self._declared:
                self.log.warn(
                    "schedule {name}: declared in the configuration, which replaces the one"
                    " added at run time",
                    log_id="schedule.replaced",
                    name=name,
                )
                continue
            try:
                spec = ScheduleSpec.from_message(admin.decode_schedule(payload))
                self.scheduler.add(spec, fired.get(name))
            except (MalformedMessage, ValueError, TooManySchedules) as e:
                self.log.error(
                    "schedule {name} from the journal is not kept: {reason}",
                    log_id="schedule.dropped",
                    name=name,
                    reason=e,
                )
                continue
            self._definitions[name] = payload

    def _fire(self, spec: ScheduleSpec, fire_time: float) -> None:
        self.admission.fire(spec.name, fire_time, spec)

    # -- the admin's requests -------------------------------------------------------------

    def add(self, message: admin.Schedule, payload: bytes) -> dict[str, Any]:
        """
        Add or replace a run-time schedule (C{payload}: its SCHEDULE's); journaled.

        @raise Refused: (invalid) a bad expression or zone; (conflict) the
            name is declared in the configuration; (queue full) past
            C{max_schedules}.
        """
        name = message.name
        if name in self._declared:
            raise Refused(
                ErrorCode.CONFLICT,
                f"schedule {name!r} is declared in the configuration; change it there",
            )
        try:
            self.scheduler.add(ScheduleSpec.from_message(message))
        except TooManySchedules as e:
            raise Refused(ErrorCode.QUEUE_FULL, str(e), log_id="limit.schedules") from None
        except ValueError as e:
            raise Refused(ErrorCode.INVALID_MESSAGE, f"schedule {name!r}: {e}") from None
        self._definitions[name] = payload
        self.queue.journal.record_schedule(name, payload)
        self.log.info("schedule {name} added", log_id="schedule.added", name=name)
        return self.scheduler.info(name)

    def remove(self, name: str) -> dict[str, Any]:
        """
        Remove a run-time schedule; journaled.

        @raise Refused: (not found) no such schedule; (conflict) it is
            declared in the configuration.
        """
        if name in self._declared:
            raise Refused(
                ErrorCode.CONFLICT,
                f"schedule {name!r} is declared in the configuration; remove it there",
            )
        try:
            self.scheduler.remove(name)
        except UnknownSchedule:
            raise Refused(ErrorCode.NOT_FOUND, f"no schedule named {name!r}") from None
        del self._definitions[name]
        self.queue.journal.record_schedule(name, None)
        self.log.info("schedule {name} removed", log_id="schedule.removed", name=name)
        return {"name": name, "removed": True}

    def describe(self) -> list[dict[str, Any]]:
        return self.scheduler.describe()

    # -- the journal's snapshot -------------------------------------------------------------

    def last_fires(self) -> list[tuple[str, float]]:
        return [
            (info["name"], info["last_fire"])
            for info in self.scheduler.describe()
            if info["last_fire"] is not None
        ]

    def definitions(self) -> list[tuple[str, bytes]]:
        return list(self._definitions.items())

    # -- service ------------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self.scheduler.start()

    def stopService(self) -> None:
        super().stopService()
        self.scheduler.stop()
