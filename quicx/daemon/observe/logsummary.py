"""
Summaries of log lines that would flood the log under load.

A daemon failing a thousand tasks a second must not write a thousand lines a
second.  L{LogSummary} counts events by kind, task type and reason and, each
time L{LogSummary.flush} runs (every C{[log] summary_interval} seconds),
logs one line for each with its count and the last such event in full: every
distinct reason is still logged (the protocol page has the daemon log every
FAILED reason), once per interval.

A limit hit (L{LogSummary.limit}) is logged at once the first time, so that
an operator sees it when it starts; while the same limit goes on being hit,
one line per interval counts the hits.  With an interval of 0 every event
and every hit is logged as it happens instead.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

MAX_KEYS = 100
"""Distinct (kind, task type, reason) triples counted between flushes; past
it, further reasons are counted together as C{other reasons}."""


class LogSummary:
    """Counts events between flushes; one line for each kind, type and reason."""

    def __init__(self, log: Logger, interval: float = 0.0) -> None:
        self.log = log
        self.interval = interval
        self._counts: dict[tuple[str, bytes, str], tuple[int, str, str, dict[str, Any]]] = {}
        # Limits hit since the last flush: the hits not logged yet, the last one.
        self._limits: dict[str, tuple[int, str, dict[str, Any]]] = {}

    def note(
        self, kind: str, task_type: bytes, reason: str, format: str, /, log_id: str, **fields: Any
    ) -> None:
        """
        Count one event of C{kind} for C{reason}; C{format} and C{fields}
        describe this one in full (a log format), C{log_id} is its line's id.
        """
        if not self.interval:
            self.log.info(format, log_id=log_id, **fields)
            return
        counts = self._counts
        key = (kind, task_type, reason)
        if key not in counts and len(counts) >= MAX_KEYS:
            key = (kind, task_type, "other reasons")
        entry = counts.get(key)
        counts[key] = (1 if entry is None else entry[0] + 1, log_id, format, fields)

    def limit(self, format: str, /, log_id: str, **fields: Any) -> None:
        """
        A limit was hit (C{format} and C{fields} say how): logged at once,
        unless C{log_id} is being hit already (since the last flush, or
        before it and counted by it): then counted for the next flush.
        """
        entry = self._limits.get(log_id)
        if entry is None or not self.interval:
            self.log.warn(format, log_id=log_id, **fields)
            if self.interval:
                self._limits[log_id] = (0, format, fields)
            return
        self._limits[log_id] = (entry[0] + 1, format, fields)

    def flush(self) -> None:
        """Log what was counted since the last flush, and start again."""
        counts, self._counts = self._counts, {}
        for (kind, task_type, reason), (count, log_id, format, fields) in counts.items():
            self.log.info(
                "{count} {type} task(s) {kind} in the last {interval:g} s: {reason}"
                " (the last: {last})",
                log_id=log_id,
                count=count,
                type=task_type.decode("utf-8", "replace"),
                kind=kind,
                interval=self.interval,
                reason=reason,
                last=format.format(**fields),
            )
        limits, self._limits = self._limits, {}
        for log_id, (count, format, fields) in limits.items():
            if not count:
                continue  # not hit again: the next hit is logged at once
            self.log.warn(
                "{count} more of {limit} in the last {interval:g} s (the last: {last})",
                log_id=log_id,
                limit=log_id,
                count=count,
                interval=self.interval,
                last=format.format(**fields),
            )
            # Still being hit: the next hits are counted, not logged at once.
            self._limits[log_id] = (0, format, fields)
