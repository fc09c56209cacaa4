"""
C{quicx worker MODULE:OBJECT}: runs a L{Worker} until SIGTERM or Ctrl-C.

C{quicx worker MODULE:OBJECT}: runs a L{Worker} (or a mapping of task types to
handlers) until SIGTERM or Ctrl-C, which let the tasks in hand finish.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from quicx.cli.arguments import (
    Commands,
    bounded_int,
    configuration_argument,
    connect_option,
    queue_list,
    shared_names,
)
from quicx.cli.common import CommandError, client_addresses
from quicx.daemon import config as configuration
from quicx.net.busypoll import DEFAULT_SPIN
from quicx.protocol.codec import MAX_CREDITS

if TYPE_CHECKING:
    from quicx.clients.worker import Worker


def add_worker(commands: Commands) -> None:
    """C{quicx worker}: its parser and options."""
    worker = commands.add(
        "worker",
        "run task handlers",
        "Run the handlers of MODULE:OBJECT -- a quicx.clients.worker.Worker, or a mapping"
        " of task types to functions -- until SIGTERM or Ctrl-C, which lets the"
        " tasks in hand finish.",
    )
    worker.add_argument("target", metavar="MODULE:OBJECT", nargs="?")
    worker.add_argument(
        "--django",
        nargs="?",
        const="default",
        metavar="ALIAS",
        help="run Django's tasks of TASKS[ALIAS] (default 'default'), a QuicxBackend,"
        " under $DJANGO_SETTINGS_MODULE, instead of MODULE:OBJECT",
    )
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
        "--types",
        type=task_types,
        metavar="all|A,B,...",
        help="the task types to announce (default: the handlers'; all: every type, and a"
        " task without a handler fails)",
    )
    worker.add_argument("--name", help="the name to announce (quicx workers, quicx quiet NAME)")
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
    worker.add_argument(
        "--loop",
        choices=("twisted", "asyncio"),
        default="twisted",
        help="run the handlers on Twisted's reactor (default), or on an asyncio loop"
        " (uvloop's where installed): MODULE:OBJECT is then a quicx.aio.AsyncWorker,"
        " or a mapping of task types to async functions",
    )
    connect_option(worker, several=True, failover=True)
    worker.set_defaults(run=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    for flag, given in (("--queues", args.queues), ("--follow", args.follow)):
        if args.protocol == 1 and given:
            raise CommandError(f"{flag} needs protocol version 2 (not --protocol 1)")
    if args.loop == "asyncio":
        return asyncio_worker(args)
    from twisted.internet import reactor
    from twisted.internet.defer import ensureDeferred
    from twisted.logger import globalLogBeginner, textFileLogObserver

    from quicx.clients.worker import Worker
    from quicx.net.busypoll import enable_busy_poll

    target: object
    if args.django is not None:
        target, address = django_target(args)
        if address and not args.connect:
            args.connect = address
    elif args.target is None:
        raise CommandError("worker needs MODULE:OBJECT, or --django", status=2)
    else:
        target = import_object(args.target)
    addresses = client_addresses(args)
    worker = configured_worker(target, args)
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    if args.busy_poll:
        try:
            enable_busy_poll(reactor, args.busy_poll)
        except ValueError as e:
            # On by default, and it only saves wake-ups: never a reason not to run.
            Worker.log.warn("busy polling is off: {error}", error=str(e))
    worker.on_terminate = lambda: reactor.callLater(0, exit_terminated)
    worker.start(reactor, addresses, failover=args.failover)
    reactor.addSystemEventTrigger("before", "shutdown", lambda: ensureDeferred(worker.stop()))
    stop_on_signals(reactor)
    # The default reactor's run() takes installSignalHandlers; IReactorCore omits it.
    cast(Any, reactor).run(installSignalHandlers=False)
    return 0


def asyncio_worker(args: argparse.Namespace) -> int:
    """C{--loop asyncio}: an L{AsyncWorker} on its own loop until SIGTERM or Ctrl-C."""
    import asyncio
    import logging

    from quicx.aio import AsyncWorker

    if args.target is None or args.django is not None:
        raise CommandError("--loop asyncio needs MODULE:OBJECT (not --django)", status=2)
    target = import_object(args.target)
    options = dict(
        concurrency=args.concurrency or 1,
        credits=args.credits,
        queues=args.queues or (),
        protocol=args.protocol or 2,
        auto_extend=args.auto_extend,
        follow=args.follow or (),
    )
    if isinstance(target, AsyncWorker):
        worker = target
        for name, value in options.items():
            if getattr(args, name, None):
                setattr(worker, name, tuple(value) if name in ("queues", "follow") else value)
    elif isinstance(target, Mapping) and all(callable(h) for h in target.values()):
        worker = AsyncWorker(target, **options)
    else:
        raise CommandError(
            f"{args.target} is a {type(target).__name__}, not an AsyncWorker or a mapping"
            " of task types to handlers"
        )
    addresses = client_addresses(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        runner: Any = importlib.import_module("uvloop").run
    except ImportError:
        runner = asyncio.run
    runner(worker.run(addresses, signals=True, failover=args.failover))
    return 0


def django_target(args: argparse.Namespace) -> tuple[Worker, str | None]:
    """The worker of C{--django}'s backend and its C{ADDRESS} (L{quicx.contrib.django.worker})."""
    if args.target is not None:
        raise CommandError("--django runs Django's tasks: give no MODULE:OBJECT", status=2)
    try:
        from quicx.contrib.django.worker import django_worker
    except ImportError as e:
        raise CommandError(f"--django needs Django: pip install 'quicx[django]' ({e})") from None
    try:
        return django_worker(args.django)
    except ValueError as e:
        raise CommandError(str(e), status=2) from None
    except Exception as e:  # django.setup(): the project's settings and apps
        raise CommandError(f"cannot set Django up: {import_error(e)}", status=2) from None


def configured_worker(target: object, args: argparse.Namespace) -> Worker:
    """
    The worker C{target} (what MODULE:OBJECT names) makes: a L{Worker} with
    the flags given applied, or one made of a mapping of task types to handlers.
    """
    from quicx.clients.worker import Worker

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
        if args.types:
            worker.types = args.types
        if args.name:
            worker.name = args.name
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
            types=args.types or "handlers",
            name=args.name or "",
        )
    else:
        raise CommandError(
            f"{args.target} is a {type(target).__name__}, not a Worker or a mapping"
            " of task types to handlers"
        )
    return worker


def task_types(value: str) -> str | tuple[str, ...]:
    """C{--types}: C{all}, or a comma-separated list of task types."""
    if value == "all":
        return value
    types = tuple(t for t in value.split(",") if t)
    if not types or len(set(types)) != len(types):
        raise argparse.ArgumentTypeError(f"{value!r} is not 'all' or a list of task types")
    return types


def exit_terminated() -> None:
    """
    The daemon terminated the worker (C{quicx terminate}): exit 0 now, not
    waiting for the handlers still running (the daemon has queued their
    tasks again).
    """
    sys.stderr.flush()
    os._exit(0)


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
