"""
How the daemon's log lines are written: C{[log] format = text} or C{json}.

How the daemon's log lines are written: C{[log] format = text} (Twisted's
usual lines) or C{json}, one JSON object per line for log shippers.

A JSON line holds the event's time (C{time}, ISO 8601 in UTC, and C{epoch},
seconds), its C{level}, its C{namespace} (the class or module that logged
it), its C{log_id} (the stable id of a Quicx message: docs/operations.md,
"Log messages"; C{null} for Twisted's own lines), the C{message} as the
text format writes it, the event's own C{fields} that JSON can carry, and a
C{failure}'s traceback as one string.  Newlines inside any of them are
escaped: an event is always one line.

C{quicx start} installs the observer itself (L{observer}); C{twistd}
takes L{json_stdout} as its C{--logger}, which the plugin's options name
when the configuration says C{json} (see L{quicx.daemon.tap}).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from enum import Enum
from typing import IO, Any

from twisted.logger import (
    FileLogObserver,
    ILogObserver,
    LogEvent,
    formatEvent,
    textFileLogObserver,
)

JSON_LOGGER = "quicx.daemon.observe.logformat.json_stdout"
"""L{json_stdout}'s name, for C{twistd --logger}."""

LEGACY_KEYS = frozenset({"message", "time", "isError", "system", "logLevel", "format", "why"})
"""The keys of a L{twisted.python.log} event (Twisted's own C{Port closed}
lines, say) that the line holds already: not repeated as fields."""


class LogFormat(Enum):
    TEXT = "text"
    JSON = "json"


def observer(log_format: LogFormat, stream: IO[str]) -> ILogObserver:
    """An observer writing each event to C{stream} in C{log_format}."""
    if log_format is LogFormat.JSON:
        return FileLogObserver(stream, json_line)
    return textFileLogObserver(stream)


def json_stdout() -> ILogObserver:
    """JSON lines on standard output: a C{twistd --logger} factory."""
    return observer(LogFormat.JSON, sys.stdout)


def json_line(event: LogEvent) -> str:
    """C{event} as one line of JSON, newline included."""
    when = event.get("log_time")
    if not isinstance(when, (int, float)):
        when = datetime.now(UTC).timestamp()
    level = getattr(event.get("log_level"), "name", None)
    legacy = LEGACY_KEYS if event.get("log_namespace") == "log_legacy" else frozenset()
    line: dict[str, Any] = {
        "time": datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
        "epoch": when,
        "level": level,
        "namespace": event.get("log_namespace"),
        "log_id": event.get("log_id"),
        "message": formatEvent(event),
        "fields": {
            key: value
            for key, value in event.items()
            if not key.startswith("log_") and key not in legacy and _serialisable(value)
        },
    }
    failure = event.get("log_failure")
    if failure is not None:
        line["failure"] = failure.getTraceback()
    return json.dumps(line) + "\n"


def _serialisable(value: object) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True
