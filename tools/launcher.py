"""
Start and stop C{twistd -n quicx} daemons in subprocesses: the one launcher
of the tests, the benchmark, the soak test and the crash matrix.

It imports nothing from quicx (the interop suite's fixtures use it too): the
daemon is the C{twistd} beside the running interpreter, so quicx must be
installed in that environment.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TWISTD = str(BIN / "twistd")
QUICX = str(BIN / "quicx")
LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


def daemon_command(*args: str, twistd: str = TWISTD) -> list[str]:
    """The command line of a foreground daemon with C{args} (C{twistd quicx} flags)."""
    return [twistd, "-n", "--pidfile=", "quicx", *args]


def tools_environment(base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """
    C{base} with the repository root first on C{PYTHONPATH}: a child process
    (a worker running C{tools.bench:noop_worker}, say) imports C{tools.*}
    whatever its working directory.
    """
    path = [str(REPO_ROOT), *filter(None, base.get("PYTHONPATH", "").split(os.pathsep))]
    return {**base, "PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process C{pid} so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    """Resident memory of process C{pid}, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def stop_all(processes: Iterable[subprocess.Popen[Any]], timeout: float = 15.0) -> None:
    """SIGTERM every live process at once, then SIGKILL those not gone within C{timeout}."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_workers(
    target: str, count: int, args: Iterable[str], log_dir: Path
) -> list[subprocess.Popen[bytes]]:
    """
    C{count} C{quicx worker TARGET ARGS} processes (C{target} may be in
    C{tools}), the stderr of each in C{log_dir/workerN.log}.
    """
    processes = []
    for n in range(count):
        with (log_dir / f"worker{n}.log").open("wb") as log:
            processes.append(
                subprocess.Popen(
                    [QUICX, "worker", target, *args],
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    env=tools_environment(),
                )
            )
    return processes


class DaemonError(RuntimeError):
    """The daemon exited, or did not listen in time; the message ends with its log."""


class DaemonProcess:
    """
    A C{twistd -n quicx} process run in C{directory}, its output in
    C{directory/quicx.log}.

    Unless C{args} say otherwise it listens on an ephemeral port of
    127.0.0.1 (no C{--listen} among them; with C{--config}, no C{--port}
    either, and the file's C{listen} wins over it) and has its control
    socket at C{directory/control.sock} (no C{--control}).  As a context
    manager it is started on entry (if it is not running) and stopped on exit.

    @ivar port: the port of the first 127.0.0.1 listener, once started.
    @ivar preexec: run in the child before C{twistd} (resource limits, say).
    @ivar pipe: copy the output to the log through a pipe (a thread of this
        process writes the file), so that a file size limit set by
        C{preexec} hits the daemon's own files only.
    """

    def __init__(
        self,
        directory: Path,
        args: Iterable[str] = (),
        *,
        preexec: Callable[[], None] | None = None,
        pipe: bool = False,
        twistd: str = TWISTD,
    ) -> None:
        self.directory = directory
        self.args = list(args)
        self.preexec = preexec
        self.pipe = pipe
        self.twistd = twistd
        self.log_path = directory / "quicx.log"
        self.control_path = directory / "control.sock"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where this run's output begins in the log
        self._copier: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def client_address(self) -> str:
        """The address as clients and C{quicx --connect} spell it."""
        return f"tcp:127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def command(self) -> list[str]:
        args = list(self.args)
        if not any(a.startswith(("--listen", "--config")) for a in args):
            args.append("--listen=tcp:0:interface=127.0.0.1")
        elif not any(a.startswith(("--listen", "--port")) for a in args):
            # A file without listen would take the default port (16381),
            # perhaps held by a daemon run beside: an ephemeral one instead.
            args.append("--port=0")
        if not any(a.startswith("--control") for a in args):
            args.append(f"--control={self.control_path}")
        return daemon_command(*args, twistd=self.twistd)

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        """Start it and wait for its C{listening on} line; L{DaemonError} if none comes."""
        assert not self.alive(), "already running"
        if not Path(self.twistd).exists():
            raise DaemonError(f"no {self.twistd}: install quicx (pip install .) for this Python")
        with self.log_path.open("ab") as log:
            self._log_start = log.tell()
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.pipe else log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                preexec_fn=self.preexec,
            )
        if self.pipe:
            assert self.process.stdout is not None
            self._copier = threading.Thread(
                target=self._copy, args=(self.process.stdout,), daemon=True
            )
            self._copier.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if match := LISTENING.search(self.log()):
                self.port = int(match.group(1))
                return self
            if self.process.poll() is not None:
                self._reap()
                raise DaemonError(f"quicx exited with {self.process.returncode}:\n{self.log()}")
            time.sleep(0.02)
        self.kill()
        raise DaemonError(f"quicx did not start listening within {timeout:g} s:\n{self.log()}")

    def _copy(self, output: IO[bytes]) -> None:
        with self.log_path.open("ab") as log:
            for line in output:
                log.write(line)
                log.flush()

    def log(self) -> str:
        """What it wrote since it was last started."""
        with self.log_path.open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        """The log once it holds C{text}; AssertionError after C{timeout}."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged within {timeout:g} s:\n{log}")
            time.sleep(0.05)
        return log

    def announced_port(self, what: str, timeout: float = 10.0) -> int:
        """
        The port in this run's first C{WHAT on 127.0.0.1:PORT} line (C{metrics},
        say: a listener other than the tasks'); AssertionError after C{timeout}.
        """
        announced = re.compile(rf"{re.escape(what)} on 127\.0\.0\.1:(\d+)")
        match = announced.search(self.wait_for_log(f"{what} on 127.0.0.1:", timeout))
        assert match is not None
        return int(match.group(1))

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        """
        SIGTERM and wait for the exit; SIGKILL past C{timeout}.  Its exit
        status: 0 for a clean stop, -9 when it had to be killed (None if it
        was never started).
        """
        if self.process is None:
            return None
        stop_all([self.process], timeout)
        self._reap()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL (a crash, as far as the daemon can tell) and wait for it."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self._reap()

    def _reap(self) -> None:
        assert self.process is not None
        self.process.wait()
        if self._copier is not None:
            self._copier.join(5)
            self._copier = None
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> DaemonProcess:
        return self if self.alive() else self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
