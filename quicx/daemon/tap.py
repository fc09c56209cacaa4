"""
The C{twistd quicx} plugin's wiring: L{Options} parses the command line
(one flag per setting, from L{quicx.daemon.settings}), L{makeService} builds
the daemon with L{quicx.daemon.service.build_daemon}.
"""

from __future__ import annotations

from typing import Any

import attrs
from twisted.application.service import IService
from twisted.python import usage

from quicx import version_line
from quicx.daemon import pmad
from quicx.daemon import settings as configuration
from quicx.daemon.service import build_daemon


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = (
        "Run the Quicx task-queue daemon. Without --config it runs on the"
        " built-in default: tcp:16381 on 127.0.0.1, an 8 MiB pool of 64 size"
        " classes from 16 to 1024 bytes."
    )
    optParameters = [
        ["config", "c", None, "Read the configuration from this quicx.conf."],
        ["control", None, None, "Control socket path for `quicx status` ('none': off)."],
        [
            "heartbeat-interval",
            None,
            None,
            "Seconds of silence before a HEARTBEAT (0: off).",
            configuration.parse_seconds,
        ],
        [
            "heartbeat-timeout",
            None,
            None,
            "Seconds of silence before a peer is dropped.",
            configuration.parse_seconds,
        ],
        [
            "pool-size",
            None,
            None,
            "PMAD pool size in bytes (suffixes K, M, G).",
            configuration.parse_size,
        ],
        ["journal", None, None, "Keep accepted tasks in this write-ahead journal file."],
        ["events", None, None, "Write task lifecycle events (NDJSON) into this directory."],
        [
            "task-timeout",
            None,
            None,
            "Requeue a task a worker holds longer than this many seconds (0: never).",
            configuration.parse_seconds,
        ],
        [
            "drain-timeout",
            None,
            None,
            "On stop, wait this long for queued and running tasks to finish (0: don't).",
            configuration.parse_seconds,
        ],
        [
            "fsync",
            None,
            None,
            "When journal records reach the disk: always, everysec or no.",
            configuration.parse_fsync,
        ],
        [
            "busy-poll",
            None,
            None,
            "Poll sockets this many seconds before sleeping (0: off; up to 0.01).",
            configuration.parse_busy_poll,
        ],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["listen"] = []
        self["allow"] = []

    def opt_listen(self, endpoint: str) -> None:
        """Listen on this endpoint string, e.g. tcp:16381 (repeatable; replaces the config's)."""
        self["listen"].append(endpoint)

    def opt_allow(self, task_type: str) -> None:
        """Accept SUBMITs of this task type only (repeatable)."""
        self["allow"].append(task_type.encode("utf-8"))

    def opt_version(self) -> None:
        """Print the version and exit."""
        print(version_line())
        raise SystemExit(0)

    def load_config(self) -> configuration.Config:
        """
        The file's (or built-in) configuration with the flags applied.

        @raise configuration.ConfigError: the result is unusable.
        """
        base = configuration.load(self["config"]) if self["config"] else configuration.Config()
        overrides: dict[str, Any] = {}
        if self["listen"]:
            overrides["listen"] = tuple(self["listen"])
        if self["allow"]:
            overrides["allowed_types"] = frozenset(self["allow"])
        for option, name in (
            ("control", "control"),
            ("heartbeat-interval", "heartbeat_interval"),
            ("heartbeat-timeout", "heartbeat_timeout"),
            ("pool-size", "pool_size"),
            ("journal", "journal"),
            ("events", "events_directory"),
            ("task-timeout", "task_timeout"),
            ("drain-timeout", "drain_timeout"),
            ("fsync", "fsync"),
            ("busy-poll", "busy_poll"),
        ):
            if self[option] is not None:
                overrides[name] = self[option]
        result = attrs.evolve(base, **overrides)
        if overrides:
            try:
                configuration.validate(result)
            except (ValueError, pmad.LayoutError) as e:
                raise configuration.ConfigError(f"command line: {e}") from None
        return result


def makeService(options: Options, reactor: Any = None) -> IService:
    """Build the daemon from parsed options (the twistd plugin's entry point)."""
    try:
        config = options.load_config()
    except configuration.ConfigError as e:
        raise SystemExit(f"quicx: {e}") from None
    return build_daemon(config, reactor)
