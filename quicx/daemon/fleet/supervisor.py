"""
C{quicx start --processes N}: a parent process that runs N daemons and stops them.

C{quicx start --processes N}: a parent process that runs N daemons, each
in a process of its own (so each gets a core of its own), and stops them.

    - SIGTERM or SIGINT to the parent sends SIGTERM to every daemon: each
      drains as one started alone does.  A second one sends SIGTERM again,
      which ends the drains at once.  The parent exits once every daemon
      has: 0, or 1 if one failed (see below).
    - A daemon that exits with status 0 on its own (C{quicx stop
      --instance I}) stays stopped; the others go on.
    - A daemon that crashes (a non-zero status, or killed by a signal) after
      running L{STEADY} seconds is restarted, with its own configuration:
      its journal, if it has one, queues its tasks again.  The crash is
      logged (C{processes.exited}); it does not make the parent's status
      non-zero.
    - A daemon that fails sooner, or at its start (its port taken, a bad
      journal), would fail again: the parent stops the others and exits 1.

The daemons run in a process group of their own, so a Ctrl-C at the
terminal reaches the parent only (which then stops them once, not twice);
on Linux each gets SIGTERM if the parent dies.  L{decide} is the rule,
without processes or clocks.
"""

from __future__ import annotations

import ctypes
import functools
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from enum import Enum

from attrs import define, field
from twisted.logger import Logger

STEADY = 10.0
"""Seconds a daemon must have run for a crash to be restarted: one that fails
sooner is failing at its start, and would fail again."""

PR_SET_PDEATHSIG = 1
"""prctl(2)'s option: the signal a process gets when its parent dies."""


class Action(Enum):
    """What the parent does when a daemon exits."""

    NOTHING = "nothing"
    RESTART = "restart"
    STOP_ALL = "stop all"


def decide(status: int, ran: float, stopping: bool) -> Action:
    """
    What to do when a daemon exits with C{status} (C{-N}: killed by signal
    N) after running C{ran} seconds, the parent C{stopping} or not.
    """
    if stopping or status == 0:
        return Action.NOTHING
    return Action.RESTART if ran >= STEADY else Action.STOP_ALL


def describe(status: int) -> str:
    """C{exited with status 1}, C{killed by SIGKILL}."""
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


STOPPING_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
"""The signals that stop the set (and each daemon)."""


def die_with_parent(parent: int) -> None:
    """
    In a child of C{parent}, before it runs its command: SIGTERM when the
    parent dies (Linux), or an exit now if it died before that was set up;
    the stopping signals, which the parent held while it started the child,
    no longer held.
    """
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING_SIGNALS)


@define
class Daemon:
    """
    One daemon of the set.

    @ivar name: how the log names it (C{daemon 2 (tcp:127.0.0.1:16383)}).
    @ivar started: when its process started, on the supervisor's clock.
    """

    name: str
    command: Sequence[str]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    stops: int = 0


@define
class Supervisor:
    """
    Runs C{daemons} until every one has exited (see the module's docstring).

    @ivar clock: monotonic seconds.
    @ivar failed: a daemon failed: the parent's status is 1.
    """

    daemons: Sequence[Daemon]
    addresses: str
    clock: Callable[[], float] = time.monotonic
    stopping: bool = False
    failed: bool = False
    _by_pid: dict[int, Daemon] = field(factory=dict)
    _stops: int = 0

    log = Logger()

    def run(self) -> int:
        """Start every daemon, wait for them all to exit; the parent's exit status."""
        before = {n: signal.signal(n, self._signalled) for n in STOPPING_SIGNALS}
        try:
            return self._run()
        finally:
            for number, handler in before.items():
                signal.signal(number, handler)

    def _run(self) -> int:
        for daemon in self.daemons:
            if not self.stopping:  # a signal during the start: the rest never start
                self._start(daemon)
        self.log.info(
            "{count} daemons (pids {pids}); clients: QUICX_ADDRESS={addresses}",
            log_id="processes.started",
            count=len(self.daemons),
            pids=", ".join(str(pid) for pid in self._by_pid),
            addresses=self.addresses,
        )
        while self._by_pid:
            for pid in self._ended():
                daemon = self._by_pid.pop(pid)
                assert daemon.process is not None
                self._exited(daemon, daemon.process.wait())
        self.log.info(
            "every daemon has stopped{failed}",
            log_id="processes.stopped",
            failed="; one failed" if self.failed else "",
        )
        return 1 if self.failed else 0

    def _ended(self) -> list[int]:
        """
        Wait until some of our daemons have exited; their pids, not yet
        reaped.  Each is watched through a pidfd, so no other child of this
        process (a test's, a library's) is ever reaped here.  Interrupted
        by a signal, the poll runs its handler and goes on (PEP 475).
        """
        watching = select.poll()
        fds = {os.pidfd_open(pid): pid for pid in self._by_pid}
        try:
            for fd in fds:
                watching.register(fd, select.POLLIN)
            return [fds[fd] for fd, _ in watching.poll()]
        finally:
            for fd in fds:
                os.close(fd)

    def _start(self, daemon: Daemon) -> None:
        """
        Start C{daemon}'s process and count it, the stopping signals held
        meanwhile: a stop that came between the two would miss it.
        """
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING_SIGNALS)
        try:
            daemon.process = subprocess.Popen(
                daemon.command,
                stdin=subprocess.DEVNULL,
                process_group=0,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )
            daemon.started = self.clock()
            self._by_pid[daemon.process.pid] = daemon
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        # Held by this thread only: in a process with other threads, a
        # stop may have come all the same, and missed this daemon.
        self._catch_up(daemon)

    def _exited(self, daemon: Daemon, status: int) -> None:
        assert daemon.process is not None
        action = decide(status, self.clock() - daemon.started, self.stopping)
        # Stopped before it handled SIGTERM (early in its start): a stop all the same.
        stopped = self.stopping and status == -signal.SIGTERM
        if status and not stopped and action is not Action.RESTART:
            self.failed = True
        if action is Action.RESTART:
            self.log.warn(
                "{daemon} {how} after {ran:.0f} s; restarting it",
                log_id="processes.exited",
                daemon=daemon.name,
                how=describe(status),
                ran=self.clock() - daemon.started,
            )
            self._start(daemon)
        elif action is Action.STOP_ALL:
            self.log.error(
                "{daemon} {how} within {steady:.0f} s of its start; stopping the others",
                log_id="processes.failed",
                daemon=daemon.name,
                how=describe(status),
                steady=STEADY,
            )
            self.stop()
        elif status and not stopped:
            self.log.error(
                "{daemon} {how} while stopping",
                log_id="processes.failed",
                daemon=daemon.name,
                how=describe(status),
            )
        elif not self.stopping:
            self.log.info(
                "{daemon} stopped; {left} left",
                log_id="processes.exited",
                daemon=daemon.name,
                left=len(self._by_pid),
            )

    def stop(self) -> None:
        """SIGTERM to every live daemon: the first time each drains, the second it stops now."""
        self.stopping = True
        self._stops += 1
        for daemon in list(self._by_pid.values()):
            self._catch_up(daemon)

    def _catch_up(self, daemon: Daemon) -> None:
        """A SIGTERM to C{daemon} for each L{stop} it has not had one for."""
        assert daemon.process is not None
        while daemon.stops < self._stops:
            daemon.stops += 1  # before the kill: a stop coming meanwhile sends its own
            os.kill(daemon.process.pid, signal.SIGTERM)

    def _signalled(self, number: int, frame: object) -> None:
        self.stop()
