"""
The C{twistd quicx} plugin's wiring: L{Options} parses the command line
(one flag per setting, from L{quicx.daemon.settings.SETTINGS}), L{makeService}
builds the daemon with L{quicx.daemon.service.build_daemon}.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.service import IService

from quicx import version_line
from quicx.daemon import settings as configuration
from quicx.daemon.service import build_daemon
from quicx.net.twisted_types import Options as BaseOptions


class Options(BaseOptions):
    """
    C{--config FILE}, then C{--FLAG VALUE} for any setting (a method
    C{opt_FLAG} each, added below from the table), which override the file's.
    A value is checked when the configuration is built (L{load_config}), so
    that a bad one is one line naming the flag rather than the usage.
    """

    synopsis = "[options]"
    longdesc = (
        "Run the Quicx task-queue daemon. Without --config it runs on the"
        " built-in default: tcp:16381 on 127.0.0.1, an 8 MiB pool of 64 size"
        " classes from 16 to 1024 bytes. Every setting of quicx.conf has a flag"
        " (docs/configuration.md); flags override the file."
    )
    optParameters = [
        ["config", "c", None, "Read the configuration from this quicx.conf."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self.given: list[tuple[configuration.Setting, str]] = []

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
        return configuration.with_flags(base, self.given)


def _recorder(setting: configuration.Setting) -> Callable[[Options, str], None]:
    def record(self: Options, text: str) -> None:
        self.given.append((setting, text))

    record.__doc__ = setting.flag_help()
    return record


for _setting in configuration.SETTINGS:
    setattr(Options, "opt_" + _setting.flag.replace("-", "_"), _recorder(_setting))


def makeService(options: Options, reactor: Any = None) -> IService:
    """Build the daemon from parsed options (the twistd plugin's entry point)."""
    try:
        config = options.load_config()
    except configuration.ConfigError as e:
        raise SystemExit(f"quicx: {e}") from None
    return build_daemon(config, reactor)
