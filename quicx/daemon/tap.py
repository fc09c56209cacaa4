"""
The C{twistd quicx} plugin's wiring: its options and L{makeService}.

The C{twistd quicx} plugin's wiring: L{Options} parses the command line
(one flag per setting, from L{quicx.daemon.config.SETTINGS}), L{makeService}
builds the daemon with L{quicx.daemon.service.build_daemon}.

twistd starts logging after it has built the service, with the observer its
own options name: so C{[log] format = json} (file or flag) is carried out by
naming L{quicx.daemon.observe.logformat.json_stdout} as twistd's C{--logger} while
the options are parsed (L{Options.postOptions}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.service import IService

from quicx import version_line
from quicx.daemon import config as configuration
from quicx.daemon.observe.logformat import JSON_LOGGER, LogFormat
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

    def checked_config(self) -> configuration.Config:
        """L{load_config}'s configuration. @raise SystemExit: it is unusable (one line)."""
        try:
            return self.load_config()
        except configuration.ConfigError as e:
            raise SystemExit(f"quicx: {e}") from None

    def postOptions(self) -> None:
        """Under twistd (whose options are the C{parent}), choose its log observer."""
        parent = getattr(self, "parent", None)
        if parent is not None and self.checked_config().log.format is LogFormat.JSON:
            log_json(parent)


def log_json(twistd: Any) -> None:
    """
    Have twistd (its parsed options C{twistd}) log JSON lines to stdout,
    unless a C{--logger} of its own was given.

    @raise SystemExit: it was told to log elsewhere: a daemon in the
        background, C{--logfile}, C{--syslog}.
    """
    if twistd.get("logger") is not None:
        return
    if (
        not twistd.get("nodaemon")
        or twistd.get("logfile") not in (None, "", "-")
        or twistd.get("syslog")
    ):
        raise SystemExit(
            "quicx: [log] format = json writes JSON lines to stdout: run twistd -n,"
            " without --logfile or --syslog"
        )
    twistd["logger"] = JSON_LOGGER


def _recorder(setting: configuration.Setting) -> Callable[[Options, str], None]:
    def record(self: Options, text: str) -> None:
        self.given.append((setting, text))

    record.__doc__ = setting.flag_help()
    return record


for _setting in configuration.SETTINGS:
    setattr(Options, "opt_" + _setting.flag.replace("-", "_"), _recorder(_setting))


def makeService(options: Options, reactor: Any = None) -> IService:
    """Build the daemon from parsed options (the twistd plugin's entry point)."""
    return build_daemon(options.checked_config(), reactor)
