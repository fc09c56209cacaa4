"""
The daemon's configuration: section records, the one settings table, the file's reader and writer.

The package's modules, each one job: L{kinds} (the syntax of values),
L{table} (what a setting is), L{sections} (the records, one per
C{[section]}, and L{Config} of them all), L{declarations} (every setting,
once), L{checks} (rules across settings), L{reader} (file and flags into a
checked configuration) and L{render} (a configuration back into a file).
What the rest of the daemon and the CLI use is named here.
"""

from __future__ import annotations

from quicx.daemon.config.checks import validate
from quicx.daemon.config.declarations import (
    BY_NAME,
    QUEUE_KEYS,
    SCHEDULE_KEYS,
    SECTIONS,
    SETTINGS,
)
from quicx.daemon.config.kinds import BUSY_POLL
from quicx.daemon.config.reader import ConfigError, load, parse, with_flags, with_settings
from quicx.daemon.config.render import render
from quicx.daemon.config.sections import Config, Limits
from quicx.daemon.config.table import SectionKey, Setting

__all__ = [
    "BUSY_POLL",
    "BY_NAME",
    "QUEUE_KEYS",
    "SCHEDULE_KEYS",
    "SECTIONS",
    "SETTINGS",
    "Config",
    "ConfigError",
    "Limits",
    "SectionKey",
    "Setting",
    "load",
    "parse",
    "render",
    "validate",
    "with_flags",
    "with_settings",
]
