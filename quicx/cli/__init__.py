"""
The C{quicx} command.

    quicx start [--config FILE] [--SETTING VALUE ...]      run the daemon
    quicx stop [--config FILE]                             stop it (SIGTERM)
    quicx status [--config FILE] [--json] [--classes]      what it is doing
    quicx status --watch [--interval S] [--count N]        ... live, every second
    quicx status --connect A,B,... [--json] [--watch]      a cluster, side by side
    quicx submit TYPE PAYLOAD|- [--wait] [--queue Q] [--priority N] [--key K]
                 [--delay 30s | --at TIME] [--retries N] [--backoff exponential:1s:5m]
                 [--keep-result [--result-ttl 1h]]
    quicx result ID [--wait] | group GID [--wait]          outcomes, from anywhere
    quicx publish NAME FILE|- | publish NAME --delete      shared data for workers
    quicx queues | peek QUEUE | task ID | schedules [--json]   look inside
    quicx events --follow [--queue Q] [--type T] [--kind K] [--json] [--count N]   live
    quicx cancel ID | pause Q | resume Q | purge Q --yes   act (admin)
    quicx dlq list [Q] | show ID | replay ID|--all | purge [Q] --yes   dead letters
    quicx schedule add NAME (--cron EXPR | --every 10m) TYPE PAYLOAD | remove NAME
    quicx worker MODULE:OBJECT [-n N] [--queues A,B] [--follow NAME]   run handlers
    quicx version | quicx init | quicx report | quicx repair-journal

Commands that talk to a daemon find it the same way: C{--connect ADDRESS}
(default C{$QUICX_ADDRESS}) for the wire, C{--config FILE} (default
C{$QUICX_CONFIG}) for its settings, control socket and pid file; any setting's
flag (C{--control}, C{--pid-file}, ...) overrides the file's.  The admin
commands (cancel, pause, resume, purge, dlq replay and purge, schedule) go
through the control socket, which only the daemon's user may open.

Mistakes users make (daemon down, bad address, bad configuration) end in one
line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import base64
import functools
import importlib
import json
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

from quicx import version_line
from quicx.clients import timing
from quicx.clients.address import (
    ADDRESS_VARIABLE,
    DEFAULT_ADDRESS,
    default_address,
    parse_address,
    split_addresses,
)
from quicx.clients.blocking import QuicxClient
from quicx.clients.blocking_cluster import open_client
from quicx.clients.cluster import TaskRef
from quicx.clients.outcomes import RetryNotice
from quicx.clients.watching import MISSED
from quicx.daemon import settings as configuration
from quicx.daemon.control import StatusUnavailable, fetch_status
from quicx.daemon.instances import (
    MAX_PROCESSES,
    address_of,
    indexed,
    instance_config,
    instance_configs,
)
from quicx.daemon.profiles import PROFILES, Reservation
from quicx.daemon.settings import format_size
from quicx.net.busypoll import DEFAULT_SPIN
from quicx.protocol import durations, lifecycle, wire
from quicx.protocol.errors import (
    GroupUnknown,
    NotFinished,
    NotFound,
    QuicxError,
    TaskCancelled,
    TaskFailed,
)
from quicx.protocol.monitor import EVENT_KINDS
from quicx.protocol.results import MAX_FOLLOW
from quicx.protocol.v2 import MAX_OPTION, MAX_RETRIES, MAX_SUBSCRIPTIONS, check_queue
from quicx.protocol.wire import MAX_CREDITS
from quicx.report.pipeline import what_if_workers
from quicx.status.text import bar, human_duration, printable, thousands

CONFIG_VARIABLE = "QUICX_CONFIG"

T = TypeVar("T")

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("run the daemon", ("start", "stop", "init", "repair-journal")),
    (
        "producers and monitors",
        (
            "submit",
            "result",
            "group",
            "publish",
            "status",
            "queues",
            "peek",
            "task",
            "schedules",
            "events",
        ),
    ),
    ("admins", ("cancel", "pause", "resume", "purge", "dlq", "schedule")),
    ("workers", ("worker",)),
    ("data", ("report",)),
    ("about quicx", ("version",)),
)
"""The commands, by who uses them, as C{quicx --help} lists them."""


class CommandError(Exception):
    """A user-facing failure: printed as one line (two at most), exit C{status}."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


# -- helpers ----------------------------------------------------------------------------


def daemon_config(args: argparse.Namespace) -> configuration.Config:
    """
    The daemon's configuration: C{--config}'s file (default C{$QUICX_CONFIG}),
    or the built-in one, with the command's setting flags applied.
    """
    given = []
    for setting in configuration.SETTINGS:
        value = getattr(args, setting.name, None)
        if value is not None:
            given += [(setting, text) for text in (value if setting.repeatable else [value])]
    try:
        base = configuration.load(args.config) if args.config else configuration.Config()
        config = configuration.with_flags(base, given)
        return config if args.instance is None else instance_config(config, args.instance)
    except configuration.ConfigError as e:
        raise CommandError(str(e)) from None


def setting_arguments(args: argparse.Namespace) -> list[str]:
    """C{--config} and the setting flags given on the command line, as given."""
    given = [f"--config={args.config}"] if args.config else []
    for setting in configuration.SETTINGS:
        value = getattr(args, setting.name, None)
        if value is not None:
            texts = value if setting.repeatable else [value]
            given += [f"--{setting.flag}={text}" for text in texts]
    return given


def control_path(args: argparse.Namespace) -> str:
    path = daemon_config(args).control_path
    if path is None:
        raise CommandError("the configuration turns the control socket off (control = none)")
    count = 0 if args.instance is not None or os.path.exists(path) else set_size(path)
    if count:
        raise CommandError(
            f"no daemon at {path}, but {count} of a set (quicx start --processes) at"
            f" {indexed(path, 0)} ...: give --instance I, from 0 to {count - 1}"
        )
    return path


def set_size(path: str) -> int:
    """How many daemons of a set have their control socket beside C{path}: C{.0}, C{.1} ..."""
    count = 0
    while count < MAX_PROCESSES and os.path.exists(indexed(path, count)):
        count += 1
    return count


def client_address(args: argparse.Namespace) -> str:
    """The daemon's address, checked: its form, and the files a C{tls:} one names."""
    address = args.connect or default_address()
    check_address(address)
    return address


def check_address(address: str) -> None:
    """
    L{CommandError} unless C{address} is one daemon's well-formed address
    whose C{tls:} files, if any, can be read.
    """
    try:
        tls = parse_address(address)[2]
        if tls is not None:
            tls.context()
    except ValueError as e:  # TlsConfigError included
        raise CommandError(f"bad address: {e}") from None


def client_addresses(args: argparse.Namespace) -> tuple[str, ...]:
    """The daemons' addresses, one or a comma-separated list, each checked."""
    try:
        addresses = split_addresses(args.connect or default_address())
    except ValueError as e:
        raise CommandError(f"bad address list: {e}") from None
    for address in addresses:
        check_address(address)
    return addresses


# -- commands ----------------------------------------------------------------------------


def cmd_version(args: argparse.Namespace) -> int:
    print(version_line())
    return 0


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


def cmd_start(args: argparse.Namespace) -> int:
    from twisted.internet import reactor
    from twisted.logger import globalLogBeginner

    from quicx.daemon.logformat import observer
    from quicx.daemon.service import build_daemon, make_directory

    if args.processes > 1 and args.instance is not None:
        raise CommandError("--processes runs a set of daemons, --instance one of them: not both")
    config = daemon_config(args)
    instances = set_of(config, args.processes) if args.processes > 1 else []
    pid_path = config.pid_path
    claim_pid_file(pid_path)
    try:
        globalLogBeginner.beginLoggingTo(
            [observer(config.log_format, sys.stdout)], redirectStandardIO=False
        )
        if instances:
            return supervise(args, instances)
        try:
            if args.instance is not None and config.journal:
                make_directory("[journal] path", os.path.dirname(config.journal))
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
    from quicx.daemon.supervisor import Daemon, Supervisor

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


def cmd_stop(args: argparse.Namespace) -> int:
    path = daemon_config(args).pid_path
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
    if config.control_path is None or config.drain_timeout <= 0:
        return ""
    try:
        status = fetch_status(config.control_path, timeout=2)
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
        f"waiting up to {config.drain_timeout:g} s (drain_timeout) for {thousands(running)}"
        f" running tasks and {thousands(queued)} queued"
        + (f" in {names}" if names else "")
        + " to finish"
    )


def cmd_status(args: argparse.Namespace) -> int:
    if not args.watch and (args.interval or args.count):
        raise CommandError("--interval and --count go with --watch", status=2)
    listed = os.environ.get(ADDRESS_VARIABLE, "")
    if not args.connect and "," in listed:
        args.connect = listed  # a list of daemons is a cluster view, as with --connect
    if args.connect:
        return wire_status(args)
    path = control_path(args)
    fetch = functools.partial(fetch_status, path, timeout=args.timeout)
    try:
        if args.watch:
            return watch_status(fetch, args)
        status = fetch()
    except StatusUnavailable as e:
        raise CommandError(str(e)) from None
    return show_status(status, args)


def show_status(status: Mapping[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        sys.stdout.write(render_status(status, classes=args.every_class))
    return 0


def watch_status(
    fetch: Callable[[], dict[str, Any]], args: argparse.Namespace, views: Any = None
) -> int:
    """C{quicx status --watch}: until Ctrl-C (exit 0), C{--count} or the daemon goes."""
    from quicx.status.watch import watch  # rich: loaded only to watch

    with suppress(KeyboardInterrupt):  # how a watch is meant to end
        watch(fetch, sys.stdout, args.interval or 1.0, args.count, as_json=args.json, views=views)
    return 0


def ask_status(address: str, timeout: float) -> dict[str, Any]:
    """
    The status document of the daemon at C{address}, over the wire (STATUS).

    @raise StatusUnavailable: with a one-line reason.
    """
    try:
        with QuicxClient(address, timeout=timeout) as client:
            return client.status()
    except TimeoutError:
        raise StatusUnavailable(f"no answer from {address} within {timeout:g} s") from None
    except OSError as e:
        raise StatusUnavailable(f"no daemon answers on {address}: {e.strerror or e}") from None
    except (QuicxError, ValueError) as e:
        raise StatusUnavailable(str(e)) from None


def wire_status(args: argparse.Namespace) -> int:
    """
    C{quicx status --connect A[,B...]}: one daemon as over the control
    socket; several side by side (exit 1 when one is down, but with --watch).
    """
    try:
        addresses = split_addresses(args.connect)
        for address in addresses:
            tls = parse_address(address)[2]
            if tls is not None:
                tls.context()
    except ValueError as e:  # TlsConfigError included
        raise CommandError(f"bad address: {e}") from None
    ask = functools.partial(ask_status, timeout=args.timeout)
    if len(addresses) == 1:
        fetch = functools.partial(ask, addresses[0])
        try:
            return watch_status(fetch, args) if args.watch else show_status(fetch(), args)
        except StatusUnavailable as e:
            raise CommandError(str(e)) from None
    from quicx.status.cluster import cluster_views, fetcher, render_cluster  # rich

    fetch_view = fetcher(addresses, ask)
    if args.watch:
        return watch_status(fetch_view, args, cluster_views)
    view = fetch_view()
    if args.json:
        print(json.dumps(view, indent=2))
    else:
        sys.stdout.write(render_cluster(view))
    return 1 if view["total"]["down"] else 0


FULLEST_CLASSES = 3
"""The size classes the folded status view shows: the fullest in use."""


def render_status(status: Mapping[str, Any], classes: bool = False) -> str:
    """The human view of a status document: every size class's line if C{classes}."""
    tasks, connections, memory = status["tasks"], status["connections"], status["memory"]
    used, total = memory["used"], memory["total"]
    lines = [
        f"Quicx {status['version']} (protocol"
        f" {', '.join(str(v) for v in status.get('protocols', [status['protocol']]))})"
        f"   pid {status['pid']}"
        f"   up {human_duration(status['uptime'])}",
        f"  listening   {', '.join(status['listening']) or '-'}",
        f"  config      {status['config']}",
        "",
        "Tasks",
        f"  submitted   {thousands(tasks['submitted']):>14}",
        f"  completed   {thousands(tasks['completed']):>14}",
        f"  failed      {thousands(tasks['failed']):>14}",
        f"  rejected    {thousands(tasks['rejected']):>14}",
        f"  requeued    {thousands(tasks['requeued']):>14}",
        f"  cancelled   {thousands(tasks.get('cancelled', 0)):>14}"
        f"   ({thousands(tasks.get('duplicates', 0))} duplicate submits answered)",
        f"  timed out   {thousands(tasks['timed_out']):>14}"
        f"   ({thousands(tasks.get('late_outcomes', 0))} outcomes came after another's)",
        f"  given up    {thousands(tasks['given_up']):>14}   (counted in failed)",
        f"  retried     {thousands(tasks.get('retried', 0)):>14}"
        f"   ({thousands(tasks.get('stale_outcomes', 0))} stale outcomes refused)",
        f"  dead        {thousands(tasks.get('dead', 0)):>14}"
        f"   ({thousands(tasks.get('dead_now', 0))} kept,"
        f" {thousands(tasks.get('dead_dropped', 0))} dropped)",
        f"  delayed     {thousands(tasks.get('delayed', 0)):>14}   (waiting for their time)",
        f"  results     {thousands(tasks.get('results_kept', 0)):>14}"
        f"   ({thousands(status.get('results', {}).get('kept', 0))} kept now,"
        f" {thousands(tasks.get('results_evicted', 0))} evicted,"
        f" {thousands(tasks.get('results_expired', 0))} expired)",
        f"  in flight   {thousands(tasks['queued'] + tasks['running']):>14}"
        f"   ({thousands(tasks['queued'])} queued + {thousands(tasks['running'])} running)",
        "",
        "Connections",
        f"  workers     {thousands(connections['workers']):>14}"
        f"   ({thousands(connections['idle_workers'])} idle)",
        f"  producers   {thousands(connections['producers']):>14}"
        f"   ({thousands(connections['paused'])} paused: not reading their replies)",
        f"  total       {thousands(connections['total']):>14}",
        *(
            f"  {printable(c['client'])} (protocol {c['protocol']}):"
            f" {c['connections']} {c['role']}{'' if c['connections'] == 1 else 's'}"
            for c in status.get("clients", ())
        ),
        "",
        *_queue_lines(status.get("queues", ())),
        "Memory",
        f"  {bar(used, total)}  {format_size(used)} / {format_size(total)}"
        f"  ({100 * used / total:.1f}%)",
        *_shared_lines(status.get("shared")),
        "",
        *_journal_lines(status.get("journal")),
        *(_class_lines if classes else _folded_class_lines)(status["classes"]),
    ]
    return "\n".join(lines) + "\n"


def _class_lines(classes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every size class: its blocks used out of its total, with a bar."""
    return ["Size classes      blocks used / total", *map(_class_line, classes)]


def _folded_class_lines(classes: Sequence[Mapping[str, Any]]) -> list[str]:
    """How many size classes are in use, and the fullest few."""
    used = [c for c in classes if c["blocks_used"]]
    fullest = sorted(used, key=lambda c: (-c["blocks_used"] / c["blocks_total"], c["size"]))
    blocks = sum(c["blocks_used"] for c in classes), sum(c["blocks_total"] for c in classes)
    return [
        f"Size classes      {len(used)} of {len(classes)} in use,"
        f" {thousands(blocks[0])} / {thousands(blocks[1])} blocks (--classes: each one)",
        *map(_class_line, fullest[:FULLEST_CLASSES]),
    ]


def _class_line(size_class: Mapping[str, Any]) -> str:
    used, total = size_class["blocks_used"], size_class["blocks_total"]
    return (
        f"  {thousands(size_class['size']):>9} B  {bar(used, total)}"
        f"  {thousands(used):>9} / {thousands(total)}"
    )


def _queue_lines(queues: Sequence[Mapping[str, Any]]) -> list[str]:
    if not queues:
        return []
    lines = ["Queues           queued   running   workers"]
    lines += [
        f"  {q['name'][:12]:<12} {thousands(q['depth']):>8} {thousands(q['running']):>9}"
        f" {thousands(q['workers']):>9}{'   paused' if q['paused'] else ''}"
        for q in queues
    ]
    return [*lines, ""]


def _shared_lines(shared: Mapping[str, Any] | None) -> list[str]:
    """Shared data, outside the pool (a daemon before protocol v2 part 3 has none)."""
    if shared is None:
        return []
    return [
        f"  shared data: {thousands(shared['names'])} names, {format_size(shared['bytes'])}"
        f" ({thousands(shared['published'])} versions published,"
        f" {thousands(shared['followers'])} followers)"
    ]


def _journal_lines(journal: Mapping[str, Any] | None) -> list[str]:
    if journal is None:
        return ["Journal     none: live tasks do not survive a restart", ""]
    lines = [
        f"Journal     {journal['path']}   (fsync {journal['fsync']})",
        f"  {format_size(journal['file_bytes'])} on disk, {format_size(journal['live_bytes'])}"
        f" live; {thousands(journal['syncs'])} syncs, {journal['compactions']} compactions",
    ]
    if journal["broken"]:
        lines.append(f"  BROKEN: {journal['broken']} (new tasks are refused)")
    return [*lines, ""]


def cmd_submit(args: argparse.Namespace) -> int:
    # fsencode: the bytes as given, even those that are not UTF-8.
    payload = read_payload(args.payload)
    # The same calls on one daemon (task ids) or several (ID@ADDRESS task refs).
    client: Any = open_client(client_addresses(args), timeout=args.timeout)
    with client:
        try:
            task_id = client.submit(
                os.fsencode(args.type),
                payload,
                queue=args.queue,
                priority=args.priority,
                key=args.key,
                fairness_key=args.fairness_key,
                delay=args.delay,
                run_at=args.run_at,
                retries=args.retries,
                backoff=args.backoff,
                keep_result=args.keep_result,
                result_ttl=args.result_ttl,
            )
        except TimeoutError:
            raise CommandError(f"no answer from the daemon within {args.timeout:g} s") from None
        print(task_id, flush=True)
        if not args.wait:
            return 0
        try:
            value = client.wait(task_id, timeout=args.timeout, on_retry=print_retry)
        except TaskFailed as e:
            print(f"task {task_id} failed: {_reason(e.reason, 0)}")
            return 1
        except TaskCancelled:
            print(f"task {task_id} cancelled")
            return 1
        except TimeoutError:
            raise CommandError(
                f"task {task_id} has not finished within {args.timeout:g} s; it still runs"
                f" (`quicx result {task_id} --wait` waits for it)"
            ) from None
    print(f"task {task_id} done", flush=True)
    if value is not None:
        print_value(value)
    return 0


def print_value(value: object) -> None:
    """A task's result: bytes as they are, text as it is, anything else as JSON."""
    if isinstance(value, bytes):
        sys.stdout.buffer.write(value)
        if sys.stdout.isatty() and not value.endswith(b"\n"):
            sys.stdout.buffer.write(b"\n")  # a prompt after it, on a terminal only
        sys.stdout.buffer.flush()
    elif isinstance(value, str):
        print(value)
    else:
        print(json.dumps(value, ensure_ascii=False))


def cmd_result(args: argparse.Namespace) -> int:
    wait = args.timeout if args.wait else 0.0
    try:
        task_id, address = task_daemon(args)
        value = _ask(args, lambda client: client.result(task_id, timeout=wait), address=address)
    except (TaskFailed, TaskCancelled) as e:
        # task N failed: REASON, task N is dead: REASON, task N was cancelled
        print(_reason(str(e), 0))
        return 1
    except NotFinished:
        if args.wait:
            raise CommandError(f"task {args.id} has not finished within {wait:g} s") from None
        raise CommandError(f"task {args.id} has not finished yet (--wait waits for it)") from None
    if value is None:
        print(f"task {args.id} done")
    else:
        print_value(value)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    if args.delete == (args.file is not None):
        raise CommandError("give the data's FILE ('-': stdin), or --delete (not both)", status=2)
    if args.delete:
        _ask(args, lambda client: client.unpublish(args.name))
        print(f"shared data {args.name} deleted")
        return 0
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as e:
        raise CommandError(f"cannot read {args.file}: {e.strerror}") from None
    answer = _ask(args, lambda client: client.publish(args.name, data))
    print(
        f"shared data {answer['name']} version {answer['version']}:"
        f" {thousands(answer['size'])} bytes, {_followers(answer['followers'])}"
    )
    return 0


def _followers(count: int) -> str:
    return "1 worker follows it" if count == 1 else f"{thousands(count)} workers follow it"


def cmd_group(args: argparse.Namespace) -> int:
    try:
        if args.wait:
            state = _ask(args, lambda client: client.wait_group(args.group, timeout=args.timeout))
        else:
            state = _ask(args, lambda client: client.group(args.group))
    except NotFinished as e:
        assert e.state is not None
        print(_group_line(e.state))
        raise CommandError(
            f"group {args.group} has not finished within {args.timeout:g} s"
        ) from None
    if args.json:
        _print_json(state)
        return 0 if state["state"] != "unknown" and (not args.wait or _all_done(state)) else 1
    if state["state"] == "unknown":
        raise CommandError(str(GroupUnknown(args.group)))
    else:
        print(_group_line(state))
    return 0 if not args.wait or _all_done(state) else 1


def _all_done(state: Mapping[str, Any]) -> bool:
    return bool(state["done"] == state["members"])


def _group_line(state: Mapping[str, Any]) -> str:
    """C{group 7: finished, 1,000 tasks: 990 done, 8 failed, 2 cancelled, 0 pending}."""
    members = state["members"]
    return (
        f"group {state['group']}: {state['state']}, {thousands(members)}"
        f" task{'' if members == 1 else 's'}: {thousands(state['done'])} done,"
        f" {thousands(state['failed'])} failed, {thousands(state['cancelled'])} cancelled,"
        f" {thousands(state['pending'])} pending"
    )


def read_payload(given: str) -> bytes:
    """A payload argument: C{-} reads stdin; else its bytes as given, even those not UTF-8."""
    return sys.stdin.buffer.read() if given == "-" else os.fsencode(given)


def print_retry(notice: RetryNotice) -> None:
    """What C{submit --wait} says of a failed attempt the daemon retries."""
    reason = _one_line(notice.reason, 200).removesuffix(" ...")  # without its traceback
    print(
        f"task {notice.task_id}: attempt {notice.attempt} failed: {reason};"
        f" retrying in {_age(max(0.0, notice.due - time.time()))}",
        flush=True,
    )


def task_argument(text: str) -> int | TaskRef:
    """An argparse type: a task id, plain (C{42}) or with its daemon (C{42@tcp:HOST:PORT})."""
    number, at, _ = text.partition("@")
    plain = bounded_int(1, wire.MAX_TASK_ID)(number)
    if not at:
        return plain
    try:
        return TaskRef.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def task_daemon(args: argparse.Namespace) -> tuple[int, str]:
    """
    C{args.id}'s number and the daemon that has it: the one an C{ID@ADDRESS}
    names, else C{--connect}'s, which must then be one daemon (ids are per daemon).
    """
    if isinstance(args.id, TaskRef):
        check_address(args.id.daemon)
        return args.id.id, args.id.daemon
    addresses = client_addresses(args)
    if len(addresses) > 1:
        raise CommandError(
            f"--connect (or ${ADDRESS_VARIABLE}) names {len(addresses)} daemons, and a task id"
            f" means something on one: give the task as ID@ADDRESS, as quicx submit prints it",
            status=2,
        )
    return args.id, addresses[0]


def local_task(args: argparse.Namespace) -> int:
    """C{args.id} for the control socket: a plain id, as that socket is one daemon's."""
    if isinstance(args.id, TaskRef):
        raise CommandError(
            f"quicx {args.command} goes through the control socket of the daemon --config"
            f" names: give task {args.id.id} there as a plain id, with the --config of the"
            f" daemon at {args.id.daemon} (and --instance I for daemon I of a set)",
            status=2,
        )
    task_id: int = args.id
    return task_id


def one_daemon(args: argparse.Namespace) -> str:
    """C{--connect}'s daemon, checked; a list is refused, as the command talks to one."""
    addresses = client_addresses(args)
    if len(addresses) > 1:
        raise CommandError(
            f"quicx {args.command} talks to one daemon, and --connect (or ${ADDRESS_VARIABLE})"
            f" names {len(addresses)}: give one with --connect",
            status=2,
        )
    return addresses[0]


def _ask(
    args: argparse.Namespace,
    call: Callable[[QuicxClient], T],
    admin: bool = False,
    address: str | None = None,
) -> T:
    """
    Call the daemon: over the control socket (the admin role), at
    C{address}, or at --connect's.  A value the client refuses to send (its
    C{ValueError}) is a usage mistake.
    """
    if address is None:
        address = f"unix:{control_path(args)}" if admin else one_daemon(args)
    try:
        with QuicxClient(address, timeout=args.timeout) as client:
            return call(client)
    except NotFinished:
        raise  # the daemon's answer: the wait ran out
    except TimeoutError:
        raise CommandError(f"no answer from {address} within {args.timeout:g} s") from None
    except ValueError as e:
        raise CommandError(str(e), status=2) from None


def _print_json(document: object) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False))


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else human_duration(seconds)


def _table(header: Sequence[str], rows: list[list[str]], align: str) -> str:
    """Plain columns, each aligned as C{align} says: C{<} left (text), C{>} right (numbers)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if side == "<" else cell.rjust(width)
            for cell, width, side in zip(cells, widths, align, strict=True)
        ).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)]) + "\n"


def cmd_queues(args: argparse.Namespace) -> int:
    queues = _ask(args, QuicxClient.queues)
    if args.json:
        _print_json(queues)
        return 0
    rows = [
        [
            q["name"] + (" (paused)" if q["paused"] else ""),
            thousands(q["depth"]),
            thousands(q["running"]),
            # A daemon without delays and dead letters has neither.
            thousands(q.get("delayed", 0)),
            thousands(q.get("dead", 0)),
            thousands(q["workers"]),
            _age(q["oldest_age"]),
            " ".join(f"{p}:{n}" for p, n in q["priorities"].items()) or "-",
        ]
        for q in queues
    ]
    header = ["queue", "queued", "running", "delayed", "dead", "workers", "oldest", "by priority"]
    sys.stdout.write(_table(header, rows, "<>>>>>><"))
    return 0


def cmd_peek(args: argparse.Namespace) -> int:
    tasks = _ask(args, lambda client: client.peek(args.queue, args.n))
    if args.json:
        _print_json(tasks)
        return 0
    if not tasks:
        print(f"queue {args.queue} has no queued task")
        return 0
    rows = [
        [str(t["id"]), printable(t["type"]), str(t["priority"]), t["state"],
         thousands(t["size"]), _age(t["age"]), printable(t["fairness_key"] or "-")]
        for t in tasks
    ]  # fmt: skip
    sys.stdout.write(
        _table(["id", "type", "priority", "state", "bytes", "age", "fairness key"], rows, "><><>><")
    )
    return 0


def cmd_task(args: argparse.Namespace) -> int:
    task_id, address = task_daemon(args)
    task = _ask(args, lambda client: client.task(task_id), address=address)
    if args.json:
        _print_json(task)
        return 0
    print(
        f"task {task['id']} ({printable(task['type'])}): {task['state']} in queue {task['queue']},"
        f" priority {task['priority']}, {thousands(task['size'])} bytes,"
        f" submitted {_age(task['age'])} ago, {_deliveries(task['attempt'])}"
    )
    if task["state"] == "running":
        print(f"  running on {task['worker']} for {_age(task['running_for'])}")
        return 0
    if task["state"] == "dead":
        print(f"  dead after {_failures(task['failures'])}: {_reason(task['reason'], 4)}")
        print(
            f"  quicx dlq show {task['id']} shows its payload,"
            f" quicx dlq replay {task['id']} runs it again"
        )
        return 0
    for reason in task["why"]:
        print(f"  waiting: {reason['text']}")
    if task["state"] == "delayed":
        if task.get("failures"):
            print(f"  {_failures(task['failures'])} so far, {task['retries']} retries allowed")
        print(f"  due {_when(task['due'])}, in {_age(max(0.0, task['due'] - time.time()))}")
        return 0
    if not task["why"]:
        print("  next in line: a worker takes it as soon as one is free")
    start = task["estimated_start"]
    if any(reason["reason"] == "paused" for reason in task["why"]):
        print(f"  estimated start: none while queue {printable(task['queue'])} is paused")
    elif start is not None:
        print(
            f"  estimated start: in {_age(max(0.0, start - time.time()))}"
            f" (the queue drains {task['drain_rate']:g} tasks/s)"
        )
    else:
        print("  estimated start: unknown (nothing has finished in this queue lately)")
    return 0


def _failures(count: int) -> str:
    return "1 failure" if count == 1 else f"{thousands(count)} failures"


def _deliveries(attempt: int) -> str:
    """What a task's C{attempt} (deliveries so far) means."""
    if attempt == 0:
        return "not yet delivered to a worker"
    return "delivered once" if attempt == 1 else f"delivered {attempt} times"


def cmd_cancel(args: argparse.Namespace) -> int:
    task_id = local_task(args)
    answer = _ask(args, lambda client: client.cancel(task_id), admin=True)
    print(f"task {answer['id']} cancelled (queue {answer['queue']})")
    return 0


def cmd_queue_action(args: argparse.Namespace) -> int:
    if args.command == "purge" and not args.yes:
        raise CommandError(
            f"purge cancels every queued task of {args.queue}: add --yes to do it", status=2
        )
    answer = _ask(args, lambda client: getattr(client, args.command)(args.queue), admin=True)
    if args.command == "purge":
        print(f"queue {answer['queue']}: {thousands(answer['purged'])} queued tasks cancelled")
    else:
        print(f"queue {answer['queue']} {'paused' if answer['paused'] else 'resumed'}")
    return 0


def _in_queue(queue: str | None) -> str:
    return f" in queue {queue}" if queue else ""


_TRACEBACK = "\nTraceback (most recent call last):"
"""Where the traceback the Python worker sends after a failure's reason begins."""


def _one_line(text: str, width: int = 60) -> str:
    """C{text} on one line, cut to C{width}; a failure's reason without its traceback."""
    reason, traced, _ = text.partition(_TRACEBACK)
    flat = printable(" ".join(reason.split())) + (" ..." if traced else "")
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _reason(text: str, indent: int) -> str:
    """A failure's reason: its first line, then its other lines (a traceback) indented."""
    first, *rest = text.rstrip("\n").split("\n")
    return "".join([printable(first)] + [f"\n{' ' * indent}{printable(line)}" for line in rest])


def _when(unix: float | None) -> str:
    """A time the daemon gave, in UTC: C{2026-12-01 09:00:00Z}; C{-} for none."""
    if unix is None:
        return "-"
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def cmd_dlq_list(args: argparse.Namespace) -> int:
    document = _ask(args, lambda client: client.dead(args.queue, args.n))
    if args.json:
        _print_json(document)
        return 0
    tasks = document["tasks"]
    if not tasks:
        print(f"no dead tasks{_in_queue(args.queue)}")
        return 0
    now = time.time()
    rows = [
        [str(t["id"]), t["queue"], t["type"], thousands(t["failures"]),
         _age(max(0.0, now - t["died_at"])), _one_line(t["reason"])]
        for t in tasks
    ]  # fmt: skip
    sys.stdout.write(
        _table(["id", "queue", "type", "failures", "dead for", "reason"], rows, "><<>><")
    )
    if document["total"] > len(tasks):
        print(
            f"{_dead_tasks(document['total'])}{_in_queue(args.queue)}:"
            f" the oldest {len(tasks)} shown (-n shows more)"
        )
    return 0


def _dead_tasks(count: int) -> str:
    return "1 dead task" if count == 1 else f"{thousands(count)} dead tasks"


def cmd_dlq_show(args: argparse.Namespace) -> int:
    task_id, address = task_daemon(args)
    try:
        task = _ask(args, lambda client: client.task(task_id), address=address)
    except NotFound:
        raise CommandError(f"no dead task {args.id} (quicx dlq list shows them)") from None
    if task["state"] != "dead":
        raise CommandError(
            f"task {args.id} is {task['state']}, not dead (see quicx task {args.id})"
        )
    payload = base64.b64decode(task["payload_base64"])
    if args.payload:
        sys.stdout.buffer.write(payload)
        return 0
    if args.json:
        _print_json(task)
        return 0
    print(
        f"task {task['id']} ({printable(task['type'])}): dead in queue {task['queue']},"
        f" priority {task['priority']}, {thousands(task['size'])} bytes,"
        f" dead for {_age(max(0.0, time.time() - task['died_at']))}"
    )
    print(f"  failures: {task['failures']}, the last on {task['worker'] or 'no worker'}")
    print(f"  reason: {_reason(task['reason'], 4)}")
    print(f"  payload: {_shown(payload)}")
    return 0


def _shown(payload: bytes) -> str:
    """A payload as text when it is printable UTF-8, else as a Python bytes literal."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return repr(payload)
    return text if text.isprintable() else repr(payload)


def cmd_dlq_replay(args: argparse.Namespace) -> int:
    if (args.id is None) != args.all:
        raise CommandError("name a dead task's ID, or --all (not both)", status=2)
    if args.queue is not None and not args.all:
        raise CommandError("--queue goes with --all (a task's own queue is known)", status=2)
    task_id = 0 if args.id is None else local_task(args)
    answer = _ask(args, lambda client: client.replay(task_id, args.queue), admin=True)
    replayed = answer["replayed"]
    if args.id is not None:
        print(f"task {args.id} replayed: queued again, its failures reset")
    elif replayed:
        print(
            f"{_dead_tasks(len(replayed))} replayed{_in_queue(args.queue)}:"
            f" {', '.join(map(str, replayed))}"
        )
    else:
        print(f"no dead tasks to replay{_in_queue(args.queue)}")
    return 0


def cmd_dlq_purge(args: argparse.Namespace) -> int:
    if not args.yes:
        whose = f"of queue {args.queue}" if args.queue else "of every queue"
        raise CommandError(f"dlq purge drops every dead task {whose}: add --yes to do it", status=2)
    answer = _ask(args, lambda client: client.dead_purge(args.queue), admin=True)
    print(f"{_dead_tasks(answer['purged'])} dropped{_in_queue(args.queue)}")
    return 0


def _cadence(schedule: Mapping[str, Any]) -> str:
    """C{cron 0 3 * * *} or C{every 10m}."""
    if schedule.get("cron"):
        return f"cron {schedule['cron']}"
    return f"every {durations.format_duration(schedule['every'])}"


def cmd_schedules(args: argparse.Namespace) -> int:
    schedules = _ask(args, QuicxClient.schedules)
    if args.json:
        _print_json(schedules)
        return 0
    if not schedules:
        print("no schedules")
        return 0
    rows = [
        [s["name"], _cadence(s), s["timezone"], printable(s["type"]), s["queue"] or "(default)",
         _when(s["next_fire"]), _when(s["last_fire"])]
        for s in schedules
    ]  # fmt: skip
    sys.stdout.write(
        _table(
            ["name", "schedule", "zone", "type", "queue", "next fire", "last fire"], rows, "<<<<<<<"
        )
    )
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    if not args.follow and args.count is None:
        raise CommandError("events: give --follow, or --count N to stop after N events", 2)
    return _ask(args, lambda client: _print_events(args, client))


def _print_events(args: argparse.Namespace, client: QuicxClient) -> int:
    """
    Print each live event as it comes, flushed when no more are waiting (a
    pipe sees each batch at once), up to --count.
    """
    printed = 0
    events = client.events(args.queue or (), args.type or (), args.kind or ())
    write = sys.stdout.write
    for event in events:
        if args.json:
            write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
        elif event["event"] == MISSED:
            write(f"missed {thousands(event['count'])} events\n")
        else:
            write(event_line(event) + "\n")
        if event["event"] != MISSED:
            printed += 1
            if printed == args.count:
                break
        if not events.waiting:
            sys.stdout.flush()
    return 0


_EVENT_FIELDS = frozenset(
    {"v", "t", "event", "task", "type", "size", "producer", "worker", "attempt", "queue"}
    | {"priority"}
)


@functools.lru_cache(maxsize=4)
def _clock(second: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(second))


def event_line(event: Mapping[str, Any]) -> str:
    """
    One event for people: its time (UTC), kind, task, queue, type, worker,
    and its own fields (C{reason: SMTP 550}).
    """
    second, millisecond = divmod(event["t"], 1000)
    task, worker = event["task"], event["worker"]
    line = (
        f"{_clock(second)}.{millisecond:03d}Z  {event['event']:<10}  "
        f"{'-' if task is None else f'#{task}':<8}  {event['queue'] or '-'}"
        f"  {printable(event['type'])}"
    )
    if worker is not None:
        line += f"  worker {worker}"
    if len(event) > len(_EVENT_FIELDS):
        line += "  " + ", ".join(
            f"{key}: {_one_line(str(value))}"
            for key, value in event.items()
            if key not in _EVENT_FIELDS
        )
    return line


def cmd_schedule_add(args: argparse.Namespace) -> int:
    payload = read_payload(args.payload)
    answer = _ask(
        args,
        lambda client: client.schedule(
            args.name,
            os.fsencode(args.type),
            payload,
            cron=args.cron,
            every=args.every,
            timezone=args.tz,
            queue=args.queue,
            priority=args.priority,
            missed=args.missed,
            catch_up=args.catch_up,
        ),
        admin=True,
    )
    print(
        f"schedule {answer['name']}: {_cadence(answer)} ({answer['timezone']}),"
        f" next fire {_when(answer['next_fire'])}"
    )
    return 0


def cmd_schedule_remove(args: argparse.Namespace) -> int:
    answer = _ask(args, lambda client: client.unschedule(args.name), admin=True)
    print(f"schedule {answer['name']} removed")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from twisted.internet import reactor
    from twisted.internet.defer import ensureDeferred
    from twisted.logger import globalLogBeginner, textFileLogObserver

    from quicx.clients.worker import Worker
    from quicx.net.busypoll import enable_busy_poll

    for flag, given in (("--queues", args.queues), ("--follow", args.follow)):
        if args.protocol == 1 and given:
            raise CommandError(f"{flag} needs protocol version 2 (not --protocol 1)")
    target = import_object(args.target)
    addresses = client_addresses(args)
    if isinstance(target, Worker):
        worker = target
        if args.concurrency:
            worker.concurrency = args.concurrency
        if args.credits:
            worker.credits = args.credits
        if args.queues:
            worker.queues = args.queues
        if args.protocol:
            worker.protocol = args.protocol
        if args.auto_extend:
            worker.auto_extend = True
        if args.follow:
            worker.follow = args.follow
    elif isinstance(target, Mapping):
        for task_type, handler in target.items():
            if not isinstance(task_type, str) or not callable(handler):
                raise CommandError(
                    f"{args.target} maps {task_type!r} to {type(handler).__name__}:"
                    " a worker needs task type names mapped to functions"
                )
        worker = Worker(
            target,
            concurrency=args.concurrency or 1,
            credits=args.credits,
            queues=args.queues or (),
            protocol=args.protocol or 2,
            auto_extend=args.auto_extend,
            follow=args.follow or (),
        )
    else:
        raise CommandError(
            f"{args.target} is a {type(target).__name__}, not a Worker or a mapping"
            " of task types to handlers"
        )
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    if args.busy_poll:
        try:
            enable_busy_poll(reactor, args.busy_poll)
        except ValueError as e:
            # On by default, and it only saves wake-ups: never a reason not to run.
            Worker.log.warn("busy polling is off: {error}", error=str(e))
    worker.start(reactor, addresses)
    reactor.addSystemEventTrigger("before", "shutdown", lambda: ensureDeferred(worker.stop()))
    stop_on_signals(reactor)
    # The default reactor's run() takes installSignalHandlers; IReactorCore omits it.
    cast(Any, reactor).run(installSignalHandlers=False)
    return 0


def stop_on_signals(reactor: Any) -> None:
    """
    The first SIGTERM or Ctrl-C stops the reactor, which lets the worker
    finish the tasks in hand; a second one exits at once (status 128 + the
    signal's number), leaving the daemon to requeue those tasks.
    """
    stopping = False

    def handle(signum: int, frame: object) -> None:
        nonlocal stopping
        if stopping:
            # os.write and os._exit: the main thread may be inside a print,
            # and handler threads still running would hold up a normal exit.
            os.write(2, b"quicx: stopping now; the daemon requeues the tasks in hand\n")
            os._exit(128 + signum)
        stopping = True
        os.write(
            2,
            b"quicx: stopping once the tasks in hand are done (Ctrl-C again to stop now)\n",
        )
        reactor.callFromThread(reactor.stop)

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def import_object(target: str) -> object:
    """
    The object C{MODULE:OBJECT} names.

    @raise CommandError: exit status 2 when the module fails to import, with
        its error and where it was raised.
    """
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise CommandError(
            f"{target!r} is not MODULE:OBJECT (e.g. examples.send_email:worker)", status=2
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as e:
        raise CommandError(f"cannot import {module_name}: {import_error(e)}", status=2) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise CommandError(f"{module_name} has no {attribute!r}") from None


def import_error(error: BaseException) -> str:
    """
    C{TYPE: MESSAGE}, and on a second line where it was raised: the module's
    own line, not importlib's.
    """
    if isinstance(error, SyntaxError):
        message, filename, line = error.msg, error.filename, error.lineno
    else:
        message = " ".join(str(error).split())
        frames = [
            frame
            for frame in traceback.extract_tb(error.__traceback__)
            if not frame.filename.startswith("<frozen ")
            and frame.filename not in {__file__, importlib.__file__}
        ]
        filename, line = (frames[-1].filename, frames[-1].lineno) if frames else (None, None)
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return f"{text}\n  at {filename}:{line}" if filename else text


# -- the parser ----------------------------------------------------------------------------


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from C{low} to C{high}."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return value

    return parse


def duration(text: str) -> float:
    """An argparse type: seconds, more than 0 (and under a year)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} seconds: it must be more than 0")
    if value >= MAX_DURATION:
        raise argparse.ArgumentTypeError(f"{text} seconds: it must be under a year")
    return value


MAX_DURATION = 365 * 86400.0


def queue_name(text: str) -> str:
    try:
        check_queue(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def queue_list(text: str) -> tuple[str, ...]:
    names = tuple(queue_name(name.strip()) for name in text.split(","))
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} names a queue twice")
    if len(names) > MAX_SUBSCRIPTIONS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SUBSCRIPTIONS} queues")
    return names


def option_key(text: str) -> bytes:
    """An argparse type: an idempotency or fairness key, 1 to 255 bytes as given."""
    key = os.fsencode(text)
    if not 0 < len(key) <= MAX_OPTION:
        raise argparse.ArgumentTypeError(f"a key is 1 to {MAX_OPTION} bytes, not {len(key)}")
    return key


def name_of(what: str) -> Callable[[str], str]:
    """An argparse type: the name of C{what}, made as a queue name is."""

    def parse(text: str) -> str:
        try:
            check_queue(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"a {what} name is 1 to 64 letters, digits or '_.:-', not {text!r}"
            ) from None
        return text

    return parse


schedule_name = name_of("schedule")
shared_name = name_of("shared-data")


def shared_names(text: str) -> tuple[str, ...]:
    """An argparse type: shared-data names, comma-separated (as FOLLOW takes them)."""
    names = tuple(shared_name(name.strip()) for name in text.split(","))
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} names shared data twice")
    if len(names) > MAX_FOLLOW:
        raise argparse.ArgumentTypeError(f"at most {MAX_FOLLOW} names")
    return names


MAX_DELAY = 0xFFFFFFFF / 1000
"""The longest delay a SUBMIT carries, in seconds (about 49 days)."""


def delay_seconds(text: str) -> float:
    """A delay (see L{durations.parse_duration}), in seconds; at most L{MAX_DELAY}."""
    seconds = durations.parse_duration(text)
    if seconds > MAX_DELAY:
        raise ValueError(f"{text}: a delay is at most {MAX_DELAY:g} s (about 49 days)")
    return seconds


def interval_seconds(text: str) -> int:
    """A schedule's interval (see L{durations.parse_duration}): whole seconds, 1 or more."""
    seconds = durations.parse_duration(text)
    if seconds != int(seconds) or not 1 <= seconds <= lifecycle.MAX_INTERVAL:
        raise ValueError(
            f"{text}: an interval is whole seconds, from 1s to {lifecycle.MAX_INTERVAL}s"
        )
    return int(seconds)


def task_type(text: str) -> str:
    """An argparse type: a task type the protocol can carry (1 to 255 bytes)."""
    try:
        wire.encode_submit(os.fsencode(text), b"")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def configuration_argument(parse: Callable[[str], T]) -> Callable[[str], T]:
    """
    An argparse type from a parser that raises C{ValueError}: a
    L{quicx.daemon.settings} value parser, or a L{durations} or L{timing} one.
    """

    def argument(text: str) -> T:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return argument


def setting_argument(setting: configuration.Setting) -> Callable[[str], str]:
    """An argparse type: a setting's text, checked (and read again with the file's)."""
    check = configuration_argument(setting.kind.parse)

    def argument(text: str) -> str:
        check(text)
        return text

    return argument


def add_setting_flags(
    add_argument: Callable[..., argparse.Action], settings: Sequence[configuration.Setting]
) -> None:
    """
    C{--FLAG VALUE} for each of C{settings}, as C{twistd quicx} takes them,
    with C{add_argument} (a parser's or an argument group's).
    """
    for setting in settings:
        choices = setting.kind.choices()
        checked: dict[str, object] = (
            {"choices": choices}
            if choices
            else {"metavar": setting.metavar, "type": setting_argument(setting)}
        )
        add_argument(
            f"--{setting.flag}",
            dest=setting.name,
            action="append" if setting.repeatable else "store",
            help=setting.flag_help().replace("%", "%%"),
            **checked,
        )


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (the usage is in --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def command_list(helps: Mapping[str, str]) -> str:
    """The commands under their L{GROUPS}' headings, for C{quicx --help}."""
    grouped = [name for _, names in GROUPS for name in names]
    if sorted(grouped) != sorted(helps):
        raise AssertionError(f"GROUPS lists {grouped}, the parser has {sorted(helps)}")
    width = max(map(len, helps)) + 4
    lines = []
    for title, names in GROUPS:
        lines += ["", f"{title}:", *(f"  {name:<{width}}{helps[name]}" for name in names)]
    return "\n".join(lines[1:])


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="quicx",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="'quicx COMMAND --help' shows a command's options.",
    )
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, help=argparse.SUPPRESS
    )
    helps: dict[str, str] = {}

    def command(name: str, help: str, description: str) -> argparse.ArgumentParser:
        helps[name] = help
        return commands.add_parser(name, help=help, description=description)

    def connect_option(sub: argparse.ArgumentParser, several: bool = False) -> None:
        sub.add_argument(
            "--connect",
            metavar="ADDRESS[,ADDRESS...]" if several else "ADDRESS",
            help=f"the daemon{'s (one or a comma-separated list of)' if several else ''}:"
            f" tcp:HOST:PORT, unix:PATH or tls:HOST:PORT"
            f" (default ${ADDRESS_VARIABLE}, else {DEFAULT_ADDRESS})",
        )

    def config_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--config",
            "-c",
            metavar="FILE",
            default=os.environ.get(CONFIG_VARIABLE) or None,
            help=f"the daemon's quicx.conf (default ${CONFIG_VARIABLE}, else the built-in one)",
        )
        sub.add_argument(
            "--instance",
            metavar="I",
            type=bounded_int(0, MAX_PROCESSES - 1),
            help="daemon I of a set (start --processes, or one systemd unit each): its port is"
            " port + I, its control socket, pid file and journal its own (docs/operations.md)",
        )

    def settings(*names: str) -> list[configuration.Setting]:
        return [configuration.BY_NAME[name] for name in names]

    start = command(
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

    stop = command(
        "stop",
        "stop a running daemon",
        "Send SIGTERM to the daemon named by the pid file and wait for it to exit.",
    )
    config_option(stop)
    add_setting_flags(stop.add_argument, settings("pid_file", "port"))
    stop.add_argument(
        "--timeout",
        type=duration,
        default=60.0,
        help="seconds to wait (60: longer than the default drain, 30)",
    )
    stop.set_defaults(run=cmd_stop)

    status = command(
        "status",
        "show what the daemon is doing",
        "Show version, pid, uptime, task totals, memory and size-class use from"
        " the daemon's control socket, or over the wire with --connect. Exits 1 if no"
        " daemon answers. With --connect A,B,... every daemon is shown side by side with"
        " their total, a daemon that does not answer as down (exit 1 then). --watch shows,"
        " every --interval, the tasks per second and latencies since the refresh before,"
        " the queues, workers and memory, in place on a terminal and as one plain block"
        " per refresh otherwise, until Ctrl-C (exit 0) or --count refreshes; it exits 1"
        " when the daemon goes away.",
    )
    config_option(status)
    add_setting_flags(status.add_argument, settings("control", "port"))
    status.add_argument(
        "--connect",
        metavar="ADDRESS[,ADDRESS...]",
        help="ask over the wire, not the control socket; several daemons (a cluster,"
        " comma-separated) are shown side by side with their total",
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="print the status document as JSON (with --watch: one a line)",
    )
    status.add_argument("--timeout", type=duration, default=5.0, help="seconds to wait (5)")
    shown = status.add_mutually_exclusive_group()
    shown.add_argument(
        "--classes",
        dest="every_class",  # not "classes": the [pool] setting's
        action="store_true",
        help="show every size class, not the fullest few",
    )
    shown.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    status.add_argument(
        "--interval",
        type=duration,
        metavar="S",
        help="with --watch: seconds between refreshes (1)",
    )
    status.add_argument(
        "--count",
        type=bounded_int(1, 1 << 31),
        metavar="N",
        help="with --watch: stop after N refreshes",
    )
    status.set_defaults(run=cmd_status)

    submit = command(
        "submit",
        "submit a task and print its id",
        "Submit one task and print its id. PAYLOAD '-' reads the payload from"
        " stdin. With --wait, also wait for the outcome: exit 0 on DONE, 1 on FAILED.",
    )
    submit.add_argument("type", type=task_type, help="the task type, e.g. send_email")
    submit.add_argument("payload", help="the payload, or - for stdin")
    submit.add_argument("--wait", action="store_true", help="wait for the outcome")
    submit.add_argument("--timeout", type=duration, default=30.0, help="seconds to wait (30)")
    submit.add_argument("--queue", type=queue_name, help="the queue (default: the daemon's)")
    submit.add_argument(
        "--priority", type=bounded_int(0, 255), help="0 to 255, higher first (default: the queue's)"
    )
    submit.add_argument(
        "--key", type=option_key, help="an idempotency key: submitted once within the window"
    )
    submit.add_argument(
        "--fairness-key", type=option_key, help="the tenant or customer the task is for"
    )
    when = submit.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        type=configuration_argument(delay_seconds),
        metavar="DURATION",
        help="run it no sooner than this from now: 90 (seconds), 30s, 10m, 1.5h",
    )
    when.add_argument(
        "--at",
        dest="run_at",
        type=configuration_argument(timing.parse_time),
        metavar="TIME",
        help="run it no sooner than TIME: ISO 8601 with its zone (2026-12-01T09:00:00Z)"
        " or Unix seconds",
    )
    submit.add_argument(
        "--retries",
        type=bounded_int(0, MAX_RETRIES),
        help="how many times a failure is retried (default: the queue's)",
    )
    submit.add_argument(
        "--backoff",
        type=configuration_argument(durations.parse_backoff),
        metavar="SPEC",
        help="the wait before each retry: fixed:10s or exponential:1s:5m, either"
        " optionally ending in :20%% of jitter (default: the queue's)",
    )
    submit.add_argument(
        "--keep-result",
        action="store_true",
        help="keep the outcome and result once it finishes, for quicx result ID"
        " (default: as the queue says)",
    )
    submit.add_argument(
        "--result-ttl",
        type=configuration_argument(timing.ttl_seconds),
        metavar="DURATION",
        help="keep them this long, in whole seconds (rounded up): 90, 30m, 1h (implies"
        " --keep-result; default: the daemon's [results] ttl; at most its max_ttl)",
    )
    connect_option(submit, several=True)
    submit.set_defaults(run=cmd_submit)

    def waiting_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--wait", action="store_true", help="wait for it to finish")
        sub.add_argument(
            "--timeout", type=duration, default=30.0, help="seconds to wait (30), or for an answer"
        )
        connect_option(sub)

    result = command(
        "result",
        "print a task's result, from any connection",
        "Print the outcome of task ID, submitted by anyone: its result (bytes and text as"
        " they are, anything else as JSON), or 'task ID done' when it gave none; exit 1"
        " when it failed, is dead or was cancelled, its kept outcome expired, it is"
        " unknown (or its outcome was not kept: see submit --keep-result), or it has not"
        " finished. With --wait, wait for it to finish.",
    )
    result.add_argument("id", type=task_argument)
    waiting_options(result)
    result.set_defaults(run=cmd_result)

    group = command(
        "group",
        "show a group of tasks",
        "Show group GID: open, closed or finished, and its tasks done, failed, cancelled"
        " and pending. With --wait, wait for it to finish: exit 0 when every task is done,"
        " 1 otherwise.",
    )
    group.add_argument("group", metavar="GID", type=bounded_int(1, wire.MAX_TASK_ID))
    group.add_argument("--json", action="store_true", help="print the group's JSON state")
    waiting_options(group)
    group.set_defaults(run=cmd_group)

    publish = command(
        "publish",
        "publish shared data to the workers",
        "Publish FILE ('-': stdin) as the next version of shared data NAME: every worker"
        " that follows NAME (quicx worker --follow NAME) gets it once, and handlers read"
        " it as context.shared[NAME]. --delete deletes NAME.",
    )
    publish.add_argument("name", type=shared_name)
    publish.add_argument("file", nargs="?", help="the data, or - for stdin")
    publish.add_argument("--delete", action="store_true", help="delete NAME")
    publish.add_argument("--timeout", type=duration, default=10.0, help="seconds to wait (10)")
    connect_option(publish)
    publish.set_defaults(run=cmd_publish)

    def looking_options(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
        sub.add_argument("--timeout", type=duration, default=10.0, help="seconds to wait (10)")
        connect_option(sub)
        return sub

    def looking(name: str, help: str, description: str) -> argparse.ArgumentParser:
        return looking_options(command(name, help, description))

    queues = looking(
        "queues",
        "list the queues",
        "List the queues: tasks queued (by priority) and running, workers subscribed,"
        " pause, and the age of the oldest task. --json prints an array of objects with"
        " at least name, depth, paused, workers (see docs/protocol.md).",
    )
    queues.set_defaults(run=cmd_queues)
    peek = looking(
        "peek",
        "show a queue's next tasks",
        "Show the next tasks of QUEUE in dispatch order without taking them. --json"
        " prints an array of objects with at least id, type, queue, priority, state.",
    )
    peek.add_argument("queue", type=queue_name)
    peek.add_argument("-n", type=bounded_int(1, 1000), default=10, help="how many (10)")
    peek.set_defaults(run=cmd_peek)
    task = looking(
        "task",
        "show a task, and why it is not running",
        "Show one task's state; for a waiting one, why it is not running yet"
        " (queue paused, tasks ahead, no worker, a key or rate limit) and an estimated start.",
    )
    task.add_argument("id", type=task_argument)
    task.set_defaults(run=cmd_task)
    schedules = looking(
        "schedules",
        "list the schedules",
        "List the schedules, from the configuration and added at run time: each one's"
        " cron expression or interval, zone, task type, queue, and its next and last"
        " fire (UTC). --json prints the daemon's array (see docs/protocol.md).",
    )
    schedules.set_defaults(run=cmd_schedules)
    events = command(
        "events",
        "print task lifecycle events as they happen",
        "Print the daemon's task lifecycle events live: one line per event (time in UTC,"
        " event, task, queue, type, worker, and the event's own fields such as a reason),"
        " or with --json the daemon's NDJSON lines (the events files' schema). When the"
        " daemon dropped events because this command read too slowly, a line says how many"
        ' ("missed N events"; with --json, {"event":"missed","count":N}). Repeat --queue,'
        " --type and --kind to watch several; without them, every event.",
    )
    events.add_argument(
        "--json", action="store_true", help="print the daemon's NDJSON lines as they come"
    )
    events.add_argument(
        "--timeout", type=duration, default=10.0, help="seconds to wait for the daemon (10)"
    )
    connect_option(events)
    events.add_argument("--follow", "-f", action="store_true", help="keep printing (Ctrl-C ends)")
    events.add_argument(
        "--count",
        metavar="N",
        type=bounded_int(1, 1 << 62),
        help="stop after N events (implies --follow)",
    )
    events.add_argument("--queue", type=queue_name, action="append", help="only this queue")
    events.add_argument("--type", type=task_type, action="append", help="only this task type")
    events.add_argument(
        "--kind", choices=EVENT_KINDS, action="append", metavar="KIND",
        help=f"only this kind of event: {', '.join(EVENT_KINDS)}",
    )  # fmt: skip
    events.set_defaults(run=cmd_events)

    def acting_options(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        config_option(sub)
        add_setting_flags(sub.add_argument, settings("control", "port"))
        sub.add_argument("--timeout", type=duration, default=10.0, help="seconds to wait (10)")
        return sub

    def acting(name: str, help: str, description: str) -> argparse.ArgumentParser:
        sub = command(name, help, description + " Goes through the control socket.")
        return acting_options(sub)

    cancel = acting(
        "cancel",
        "cancel a queued task",
        "Cancel a queued task: its producer hears CANCELLED. A running task is not"
        " interrupted (exit 1).",
    )
    cancel.add_argument("id", type=task_argument)
    cancel.set_defaults(run=cmd_cancel)
    for name, help, description in (
        ("pause", "stop dispatching from a queue", "The queue keeps accepting tasks."),
        ("resume", "dispatch from a paused queue again", "Dispatch starts again at once."),
        ("purge", "cancel every queued task of a queue", "Running tasks are left alone."),
    ):
        action = acting(name, help, description)
        action.add_argument("queue", type=queue_name)
        if name == "purge":
            action.add_argument("--yes", action="store_true", help="yes, cancel them all")
        action.set_defaults(run=cmd_queue_action)

    dlq = command(
        "dlq",
        "list, show, replay or purge dead tasks",
        "The dead-letter set: tasks that failed for good after their retries (or"
        " were failed as unrecoverable). list and show look; replay and purge act,"
        " through the control socket.",
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    dead_list = looking_options(
        dlq.add_parser(
            "list",
            help="the dead tasks, oldest first",
            description="List the dead tasks of QUEUE (default: of every queue), oldest"
            " first: id, queue, type, failures, how long dead, the last reason.",
        )
    )
    dead_list.add_argument("queue", nargs="?", type=queue_name)
    dead_list.add_argument("-n", type=bounded_int(1, 1000), default=100, help="how many (100)")
    dead_list.set_defaults(run=cmd_dlq_list)
    dead_show = looking_options(
        dlq.add_parser(
            "show",
            help="a dead task and its payload",
            description="Show a dead task: its failures, last worker, reason and payload.",
        )
    )
    dead_show.add_argument("id", type=task_argument)
    dead_show.add_argument(
        "--payload", action="store_true", help="write only its payload's bytes to stdout"
    )
    dead_show.set_defaults(run=cmd_dlq_show)
    replay = acting_options(
        dlq.add_parser(
            "replay",
            help="queue dead tasks again",
            description="Put the dead task ID (or, with --all, every dead task of --queue, or"
            " of every queue) back in its queue, its failures reset. Goes through the"
            " control socket.",
        )
    )
    replay.add_argument("id", nargs="?", type=task_argument)
    replay.add_argument("--all", action="store_true", help="every dead task (of --queue)")
    replay.add_argument("--queue", type=queue_name, help="with --all: only this queue's")
    replay.set_defaults(run=cmd_dlq_replay)
    dead_purge = acting_options(
        dlq.add_parser(
            "purge",
            help="drop dead tasks",
            description="Drop the dead tasks of QUEUE (default: of every queue) for good."
            " Goes through the control socket.",
        )
    )
    dead_purge.add_argument("queue", nargs="?", type=queue_name)
    dead_purge.add_argument("--yes", action="store_true", help="yes, drop them")
    dead_purge.set_defaults(run=cmd_dlq_purge)

    schedule = command(
        "schedule",
        "add or remove a run-time schedule",
        "Add (or replace) or remove a schedule that submits a task on a cron expression"
        " or at an interval. Schedules a [schedule NAME] section declares are changed in"
        " the configuration, not here. Goes through the control socket.",
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    add = acting_options(
        schedule.add_parser(
            "add",
            help="add or replace a schedule",
            description="Submit a task of TYPE with PAYLOAD ('-': stdin) on --cron (5 fields,"
            " in --tz) or --every interval, from now on.",
        )
    )
    add.add_argument("name", type=schedule_name)
    cadence = add.add_mutually_exclusive_group(required=True)
    cadence.add_argument("--cron", metavar="EXPR", help="a 5-field cron expression: '0 3 * * *'")
    cadence.add_argument(
        "--every",
        type=configuration_argument(interval_seconds),
        metavar="DURATION",
        help="an interval: 90 (seconds), 10m, 1.5h",
    )
    add.add_argument("type", type=task_type, help="the task type")
    add.add_argument("payload", help="the payload, or - for stdin")
    add.add_argument("--tz", default="UTC", metavar="ZONE", help="the cron's IANA zone (UTC)")
    add.add_argument("--queue", type=queue_name, help="the queue (default: the daemon's)")
    add.add_argument("--priority", type=bounded_int(0, 255), help="0 to 255 (default: the queue's)")
    add.add_argument(
        "--missed",
        choices=[m.name.lower() for m in lifecycle.Missed],
        default="once",
        help="what to fire for times the daemon was down: none, once (default), or all",
    )
    add.add_argument(
        "--catch-up",
        type=bounded_int(0, 0xFFFF),
        default=100,
        metavar="N",
        help="with --missed all: at most N of them (100)",
    )
    add.set_defaults(run=cmd_schedule_add)
    remove = acting_options(
        schedule.add_parser(
            "remove", help="remove a schedule", description="Remove a run-time schedule."
        )
    )
    remove.add_argument("name", type=schedule_name)
    remove.set_defaults(run=cmd_schedule_remove)

    worker = command(
        "worker",
        "run task handlers",
        "Run the handlers of MODULE:OBJECT -- a quicx.clients.worker.Worker, or a mapping"
        " of task types to functions -- until SIGTERM or Ctrl-C, which lets the"
        " tasks in hand finish.",
    )
    worker.add_argument("target", metavar="MODULE:OBJECT")
    worker.add_argument(
        "--concurrency",
        "-n",
        type=bounded_int(1, 10_000),
        help="connections to the daemon (default 1)",
    )
    worker.add_argument(
        "--credits",
        type=bounded_int(1, MAX_CREDITS),
        help="tasks each connection may hold at once (default: each connection"
        " chooses by its handlers' pace; above 1 uses Quicx's READY credit extension)",
    )
    worker.add_argument(
        "--queues",
        type=queue_list,
        metavar="A,B,...",
        help="the queues to serve, in order (default: the daemon's default queue)",
    )
    worker.add_argument(
        "--protocol",
        type=int,
        choices=(1, 2),
        help="the protocol version to speak (default 2, falling back to 1)",
    )
    worker.add_argument(
        "--follow",
        type=shared_names,
        metavar="NAME,...",
        help="shared data to follow: handlers read it as context.shared[NAME]",
    )
    worker.add_argument(
        "--auto-extend",
        action="store_true",
        help="extend each task's lease every half lease while its handler runs",
    )
    worker.add_argument(
        "--busy-poll",
        type=configuration_argument(configuration.BUSY_POLL.parse),
        metavar="SECONDS",
        default=DEFAULT_SPIN,
        help=f"poll for tasks this long before sleeping (default {DEFAULT_SPIN:g};"
        " 0: off; up to 0.01)",
    )
    connect_option(worker, several=True)
    worker.set_defaults(run=cmd_worker)

    command("version", "print the version", "Print 'quicx VERSION protocol N'.").set_defaults(
        run=cmd_version
    )
    init = command(
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
    report = command(
        "report",
        "a PySpark report over lifecycle events",
        "Read the daemon's event files (paths or any URI Spark reads) and write"
        " Parquet tables and report.html to --out (see docs/pipeline.md)."
        " Needs quicx[spark] and Java.",
    )
    report.add_argument("events", nargs="+", help="event files or directories")
    report.add_argument("--out", required=True, help="where the tables and report.html go")
    report.add_argument("--master", help="the Spark master (default local[*])")
    report.add_argument(
        "--what-if",
        type=what_if_workers,
        metavar="workers=N,N...",
        help="also predict queue waits and backlog with these numbers of workers"
        " (e.g. workers=1,2,4,8; see docs/pipeline.md)",
    )
    report.add_argument(
        "--timings", action="store_true", help="print the seconds each phase took to stderr"
    )
    report.set_defaults(run=cmd_report)
    repair = command(
        "repair-journal",
        "keep a damaged journal's good records",
        "Rename a journal the daemon refuses as damaged to FILE.damaged-TIMESTAMP"
        " and write, in its place, a journal of its good records in order (see"
        " docs/operations.md, Recovery). Run it with the daemon stopped.",
    )
    repair.add_argument("file", help="the journal file")
    repair.set_defaults(run=cmd_repair_journal)
    # After the subcommands: their usage lines start with the parser's prog.
    parser.usage = "quicx [-h] [--version] COMMAND ..."
    parser.description = "The Quicx task queue.\n\n" + command_list(helps)
    return parser


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


def cmd_report(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError as e:
        raise CommandError(f"the report needs PySpark: pip install 'quicx[spark]' ({e})") from None
    from quicx.report import pipeline as report

    argv = [*args.events, f"--out={args.out}"]
    if args.master:
        argv.append(f"--master={args.master}")
    if args.what_if:
        argv.append("--what-if=workers=" + ",".join(map(str, args.what_if)))
    if args.timings:
        argv.append("--timings")
    return report.main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except CommandError as e:
        print(f"quicx: {e}", file=sys.stderr)
        return e.status
    except QuicxError as e:
        print(f"quicx: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`quicx task 3 | head -2`): stop quietly, as a
        # shell tool killed by SIGPIPE does; nothing more is written to it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
