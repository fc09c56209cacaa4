"""
C{quicx start}, C{stop}, C{init}, C{version} and C{repair-journal}.

Running the daemon: C{quicx start} (one daemon or a set), C{stop} (waiting out
its drain), C{init} (a quicx.conf), C{version} and C{repair-journal}.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence

from quicx import version_line
from quicx.cli.arguments import (
    Commands,
    add_setting_flags,
    bounded_int,
    config_option,
    duration,
    named_settings,
)
from quicx.cli.common import CommandError, daemon_config, setting_arguments
from quicx.daemon import config as configuration
from quicx.daemon.control import StatusUnavailable, fetch_status
from quicx.daemon.fleet.instances import MAX_PROCESSES, address_of, instance_configs
from quicx.daemon.profiles import PROFILES, Reservation
from quicx.status.text import printable, thousands


def add_start(commands: Commands) -> None:
    """C{quicx start}: its parser and options."""
    start = commands.add(
        "start",
        "run the daemon in the foreground",
        "Run the daemon in the foreground, logging to stdout, until SIGTERM or"
        " Ctrl-C. Without --config it runs on the built-in default"
        " (tcp:16381 on 127.0.0.1, 8 MiB pool). Every setting has a flag, which"
        " overrides the file's (see docs/configuration.md).",
    )
    config_option(start)
    start.add_argument(
        "--processes",
        metavar="N",
        type=bounded_int(1, MAX_PROCESSES),
        default=1,
        help="run N daemons, one process each, on port, port + 1, ... (default 1); the"
        " address list for clients is logged; SIGTERM stops them all",
    )
    settings_group = start.add_argument_group("settings (override the file's)")
    add_setting_flags(settings_group.add_argument, configuration.SETTINGS)
    start.set_defaults(run=cmd_start)


def cmd_start(args: argparse.Namespace) -> int:
    from twisted.internet import reactor
    from twisted.logger import globalLogBeginner

    from quicx.daemon.observe.logformat import observer
    from quicx.daemon.service import build_daemon, make_directory

    if args.processes > 1 and args.instance is not None:
        raise CommandError("--processes runs a set of daemons, --instance one of them: not both")
    config = daemon_config(args)
    instances = set_of(config, args.processes) if args.processes > 1 else []
    pid_path = config.server.pid_path
    claim_pid_file(pid_path)
    try:
        globalLogBeginner.beginLoggingTo(
            [observer(config.log.format, sys.stdout)], redirectStandardIO=False
        )
        if instances:
            return supervise(args, instances)
        try:
            if args.instance is not None and config.journal.path:
                make_directory("[journal] path", os.path.dirname(config.journal.path))
            service = build_daemon(config, reactor)
            try:
                service.privilegedStartService()
            except SystemExit:
                # No stale control socket: the ports opened close, then the error.
                closed = service.close_listeners()
                closed.addBoth(lambda _: reactor.callWhenRunning(reactor.stop))
                reactor.run()
                raise
        except SystemExit as e:
            raise CommandError(str(e.code).removeprefix("quicx: ")) from None
        reactor.callWhenRunning(service.startService)
        reactor.addSystemEventTrigger("before", "shutdown", service.stopService)
        reactor.run()
    finally:
        with_pid_file_removed(pid_path)
    return 0


def set_of(config: configuration.Config, count: int) -> list[configuration.Config]:
    """The configurations of C{count} daemons of C{config} (L{instance_configs})."""
    try:
        return instance_configs(config, count)
    except configuration.ConfigError as e:
        raise CommandError(str(e)) from None


def supervise(args: argparse.Namespace, configs: Sequence[configuration.Config]) -> int:
    """Run C{configs}' daemons, each C{quicx start --instance I} in its own process."""
    from quicx.daemon.fleet.supervisor import Daemon, Supervisor

    command = [sys.executable, "-m", "quicx.cli", "start", *setting_arguments(args)]
    addresses = [address_of(config) for config in configs]
    daemons = [
        Daemon(f"daemon {index} ({address})", [*command, f"--instance={index}"])
        for index, address in enumerate(addresses)
    ]
    return Supervisor(daemons, ",".join(addresses)).run()


def claim_pid_file(path: str) -> None:
    """Write our pid to C{path}, unless a live daemon already owns it."""
    existing = read_pid(path)
    if existing is not None and process_alive(existing):
        raise CommandError(f"a daemon is already running (pid {existing}, from {path})")
    try:
        with open(path, "w") as f:
            f.write(f"{os.getpid()}\n")
    except OSError as e:
        raise CommandError(f"cannot write pid file {path}: {e.strerror}") from None


def with_pid_file_removed(path: str) -> None:
    if read_pid(path) == os.getpid():
        os.unlink(path)


def read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def process_alive(pid: int) -> bool:
    """Whether C{pid} runs; a zombie (exited, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            # "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def add_stop(commands: Commands) -> None:
    """C{quicx stop}: its parser and options."""
    stop = commands.add(
        "stop",
        "stop a running daemon",
        "Send SIGTERM to the daemon named by the pid file and wait for it to exit.",
    )
    config_option(stop)
    add_setting_flags(stop.add_argument, named_settings("pid_file", "port"))
    stop.add_argument(
        "--timeout",
        type=duration,
        default=60.0,
        help="seconds to wait (60: longer than the default drain, 30)",
    )
    stop.set_defaults(run=cmd_stop)


def cmd_stop(args: argparse.Namespace) -> int:
    path = daemon_config(args).server.pid_path
    pid = read_pid(path)
    if pid is None:
        if os.path.exists(path):
            raise CommandError(f"no daemon to stop: {path} holds no pid")
        raise CommandError(f"no daemon to stop: no pid file at {path}")
    if not process_alive(pid):
        os.unlink(path)
        raise CommandError(f"no daemon to stop: pid {pid} (from {path}) is not running")
    note = drain_note(daemon_config(args))
    os.kill(pid, signal.SIGTERM)
    if note:
        print(f"stopping quicx (pid {pid}): {note}", flush=True)
    deadline = time.monotonic() + args.timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            raise CommandError(f"pid {pid} did not exit within {args.timeout:g} s")
        time.sleep(0.05)
    print(f"stopped quicx (pid {pid})")
    return 0


def drain_note(config: configuration.Config) -> str:
    """
    What the daemon's drain will wait for, asked of its control socket before
    the stop: the running tasks and those queued where a worker may take them
    (C{""} when nothing, or no answer).
    """
    server = config.server
    if server.control_path is None or server.drain_timeout <= 0:
        return ""
    try:
        status = fetch_status(server.control_path, timeout=2)
    except StatusUnavailable:
        return ""
    served = [
        q for q in status.get("queues", ()) if q["depth"] and q["workers"] and not q["paused"]
    ]
    running, queued = status["tasks"]["running"], sum(q["depth"] for q in served)
    if not (running or queued):
        return ""
    names = ", ".join(printable(q["name"]) for q in served)
    return (
        f"waiting up to {server.drain_timeout:g} s (drain_timeout) for {thousands(running)}"
        f" running tasks and {thousands(queued)} queued"
        + (f" in {names}" if names else "")
        + " to finish"
    )


def add_init(commands: Commands) -> None:
    """C{quicx init}: its parser and options."""
    init = commands.add(
        "init",
        "print a quicx.conf of every setting at its default",
        "Print a quicx.conf with every setting, its help and its default"
        " (the built-in configuration): quicx init > quicx.conf."
        " With --profile, a profile's settings instead, and the memory it reserves.",
    )
    init.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="; ".join(f"{p.name}: {p.summary}" for p in PROFILES.values())
        + " (the memory it reserves goes to stderr and the file's head)",
    )
    init.set_defaults(run=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    if args.profile is None:
        sys.stdout.write(configuration.render(configuration.Config()))
        return 0
    profile = PROFILES[args.profile]
    config = profile.config()
    reservation = Reservation.of(config)
    sys.stdout.write(configuration.render(config, reservation.notes(profile)))
    print(reservation.line(profile), file=sys.stderr)
    return 0


def add_version(commands: Commands) -> None:
    """C{quicx version}: its parser and options."""
    commands.add("version", "print the version", "Print 'quicx VERSION protocol N'.").set_defaults(
        run=cmd_version
    )


def cmd_version(args: argparse.Namespace) -> int:
    print(version_line())
    return 0


def add_repair_journal(commands: Commands) -> None:
    """C{quicx repair-journal}: its parser and options."""
    repair = commands.add(
        "repair-journal",
        "keep a damaged journal's good records",
        "Rename a journal the daemon refuses as damaged to FILE.damaged-TIMESTAMP"
        " and write, in its place, a journal of its good records in order (see"
        " docs/operations.md, Recovery). Run it with the daemon stopped.",
    )
    repair.add_argument("file", help="the journal file")
    repair.set_defaults(run=cmd_repair_journal)


def cmd_repair_journal(args: argparse.Namespace) -> int:
    from quicx.daemon.journal import records, recovery

    try:
        result = recovery.repair(args.file, time.time())
    except records.JournalCorrupt as e:
        raise CommandError(str(e)) from None
    except OSError as e:
        raise CommandError(f"{args.file}: cannot repair: {e.strerror}") from None
    if not result.moved_to:
        print(f"{args.file}: no damage found ({result.kept} good records); left as it was")
        return 0
    for offset, length in result.damaged:
        print(f"skipped {length} damaged bytes at offset {offset}")
    print(f"{args.file}: {result.kept} good records kept; the original is now {result.moved_to}")
    return 0
