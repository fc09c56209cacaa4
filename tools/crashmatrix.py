"""
The crash matrix: kill the daemon (and workers) with SIGKILL under load, for
each journal fsync policy, and count what the crashes cost.

    python -m tools.crashmatrix --rounds 10 --seconds 4 --json-out crash.json

Each round, for one fsync policy:

  1. start C{twistd -n quicx} with a fresh journal in a temporary directory,
     on 127.0.0.1 and an ephemeral port;
  2. start worker processes (this script, C{_worker}) that append a line for
     every task they run -- with one C{write} on an C{O_APPEND} file, before
     the DONE is sent, so the record survives the worker's own SIGKILL -- and
     producer threads that pipeline bursts of SUBMITs with unique payloads and
     note, for each, OK (and its task id), ERROR, or no answer;
  3. at a random moment (or right after a producer read a burst of OKs) kill
     the daemon with SIGKILL; in some rounds also kill a worker mid-task and
     start another;
  4. restart the daemon on the same journal, keep submitting for a while (so
     that task ids given after the restart are seen), stop submitting, let
     the workers drain the queue, then stop everything.

Then it counts (L{tools.crashcount}), per policy: acknowledged tasks that
never ran (lost), tasks that ran more than once (split by what explains the second run), refused
tasks that ran, tasks without an answer that ran or not, and task ids that
were given to two different payloads.  For the policies that do not sync
every OK (everysec, no) it measures the window: how long before the kill the
lost tasks' OKs were read.

It prints a Markdown table and, with C{--json-out}, writes every figure.
Every loop is bounded in count and time, and every process it starts it
stops.  See docs/operations.md, "Crash matrix".

Not part of the wheel: run it from the repository root.  It needs quicx
installed (the daemon's C{twistd} is taken from beside the running
interpreter).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from tools.crashcount import RoundResult, Submission, count, summarize, table
from tools.launcher import DaemonProcess, stop_all, tools_environment

if TYPE_CHECKING:
    from quicx.daemon.control import StatusUnavailable, fetch_status
    from quicx.protocol import registry, wire
    from quicx.protocol.frames import Frame, FrameParser


def load_quicx() -> None:
    """
    Import quicx's wire format here, not at the top, so that C{--help} works
    without quicx installed.
    """
    global CLIENT_MAX_LENGTH, Frame, FrameParser, StatusUnavailable, fetch_status, registry, wire
    from quicx.clients.address import CLIENT_MAX_LENGTH
    from quicx.daemon.control import StatusUnavailable, fetch_status
    from quicx.protocol import registry, wire
    from quicx.protocol.frames import Frame, FrameParser


CLIENT_MAX_LENGTH = 0
RECOVERED = re.compile(r"(\d+) records, (\d+) tasks recovered")
TASK_TYPE = b"crash"
MODES = ("always", "everysec", "no")
CONFIG = """\
[server]
listen = tcp:0:interface=127.0.0.1
drain_timeout = 5
[allocator]
pool_size = {pool_size}
class = 64,100
[journal]
path = {journal}
fsync = {mode}
"""


def now() -> float:
    return time.time()


def die_with_parent(file_size_limit: int = 0) -> Callable[[], None]:
    """
    A C{preexec_fn}: the child gets SIGKILL if this process dies (Linux's
    C{PR_SET_PDEATHSIG}), so that nothing outlives a killed matrix; and,
    with C{file_size_limit}, it may write no file past that size.
    """

    def prepare() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if file_size_limit:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return prepare


# -- the worker process ---------------------------------------------------------------


def worker_main(argv: list[str]) -> int:
    """
    A worker: run tasks by appending C{TIME NAME TASK_ID CONNECTED PAYLOAD}
    lines to C{--out} (CONNECTED: when its connection was made, which tells
    which daemon sent the task), then answer DONE.  It reads the daemon's port from
    C{--port-file} at each (re)connection and stops at C{--until} or SIGTERM.
    """
    parser = argparse.ArgumentParser(prog="python -m tools.crashmatrix _worker")
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--until", type=float, required=True)
    parser.add_argument("--credits", type=int, default=4)
    parser.add_argument("--work-ms", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    load_quicx()
    rng = random.Random(args.seed)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    name = args.name.encode()

    def running() -> bool:
        return not stopping.is_set() and now() < args.until

    while running():
        try:
            port = int(Path(args.port_file).read_text())
            sock = socket.create_connection(("127.0.0.1", port), timeout=1.0)
        except (OSError, ValueError):
            time.sleep(0.02)
            continue
        connected = now()
        with sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(0.2)
            frames = FrameParser(CLIENT_MAX_LENGTH, check_types=False)
            try:
                sock.sendall(wire.encode_ready(args.credits))
                while running():
                    try:
                        data = sock.recv(1 << 16)
                    except TimeoutError:
                        continue
                    if not data:
                        break
                    replies = []
                    for event in frames.feed(data):
                        if not isinstance(event, Frame):
                            continue
                        message = registry.decode(
                            event.message_type, event.payload, wire.PROTOCOL_VERSION
                        )
                        if isinstance(message, wire.Task):
                            # The record of the run reaches the kernel before
                            # the DONE is sent: it survives our SIGKILL.
                            os.write(
                                fd,
                                b"%.6f %s %d %.6f %s\n"
                                % (now(), name, message.task_id, connected, message.payload),
                            )
                            if args.work_ms > 0:
                                time.sleep(rng.uniform(0, 2 * args.work_ms) / 1000)
                            replies.append(wire.encode_done(message.task_id))
                        elif isinstance(message, wire.Heartbeat):
                            replies.append(wire.encode_pong())
                    if replies:
                        sock.sendall(b"".join(replies))
            except OSError:
                pass
        if running():
            time.sleep(0.02)
    os.close(fd)
    return 0


# -- producers ------------------------------------------------------------------------


class Round:
    """The shared state of one round: the daemon's port, the kill switch."""

    def __init__(self, number: int, mode: str, port_file: Path) -> None:
        self.number = number
        self.mode = mode
        self.port_file = port_file
        self.port = 0
        self.epoch = 0
        self.submissions: dict[bytes, Submission] = {}
        self.lock = threading.Lock()
        self.stop_submitting = threading.Event()
        self.kill_armed = threading.Event()
        self.kill_delay = 0.0  # seconds between a burst's last answer and the kill
        self.killed = threading.Event()
        self.kill_time = 0.0
        self.restart_time = 0.0  # just before the new daemon started
        self.kill_by = ""
        self.daemon: DaemonProcess | None = None
        self.outcomes = 0

    def set_port(self, port: int) -> None:
        self.port = port
        temporary = self.port_file.with_suffix(".tmp")
        temporary.write_text(str(port))
        temporary.replace(self.port_file)

    def kill_daemon(self, by: str) -> bool:
        """SIGKILL the daemon once; whether this call did it."""
        with self.lock:
            if self.killed.is_set() or self.daemon is None or not self.daemon.alive():
                return False
            self.kill_time = now()
            self.daemon.kill()
            self.kill_by = by
            self.killed.set()
            return True


class Producer(threading.Thread):
    """Pipelines bursts of SUBMITs, reads their answers, notes each one."""

    def __init__(self, state: Round, index: int, rate: float, seed: int, until: float) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.state = state
        self.index = index
        self.rate = rate
        self.rng = random.Random(seed)
        self.until = until
        self.sequence = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the round
            self.error = e

    def _running(self) -> bool:
        return not self.state.stop_submitting.is_set() and now() < self.until

    def _run(self) -> None:
        while self._running():
            port, epoch = self.state.port, self.state.epoch
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=1.0)
            except OSError:
                time.sleep(0.01)
                continue
            with sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(5.0)
                frames = FrameParser(CLIENT_MAX_LENGTH, check_types=False)
                inbox: list[registry.Message] = []
                with contextlib.suppress(OSError, ConnectionError):
                    while self._running():
                        started = time.monotonic()
                        size = self.rng.randint(1, 200)
                        burst = [self._payload() for _ in range(size)]
                        sent = now()
                        for payload in burst:
                            self.state.submissions[payload] = Submission(sent=sent, epoch=epoch)
                        sock.sendall(b"".join(wire.encode_submit(TASK_TYPE, p) for p in burst))
                        for payload in burst:
                            self._answer(sock, frames, inbox, payload)
                        if self.state.kill_armed.is_set():
                            delay = self.state.kill_delay
                            if delay:
                                time.sleep(delay)
                            self.state.kill_daemon(
                                f"{delay * 1000:.1f} ms after a burst of {size} answers"
                            )
                        pause = size / self.rate - (time.monotonic() - started)
                        if pause > 0:
                            time.sleep(pause)
            time.sleep(0.01)

    def _payload(self) -> bytes:
        self.sequence += 1
        return b"r%d-p%d-s%d" % (self.state.number, self.index, self.sequence)

    def _answer(
        self,
        sock: socket.socket,
        frames: FrameParser,
        inbox: list[registry.Message],
        payload: bytes,
    ) -> None:
        """Read the answer to C{payload}'s SUBMIT (raise OSError if none comes)."""
        while True:
            while not inbox:
                data = sock.recv(1 << 16)
                if not data:
                    raise ConnectionError("the daemon closed the connection")
                for event in frames.feed(data):
                    if isinstance(event, Frame):
                        inbox.append(
                            registry.decode(
                                event.message_type, event.payload, wire.PROTOCOL_VERSION
                            )
                        )
            message = inbox.pop(0)
            submission = self.state.submissions[payload]
            if isinstance(message, wire.Ok):
                submission.status, submission.task_id = "ok", message.task_id
                submission.answered = now()
                return
            if isinstance(message, wire.Error):
                submission.status, submission.reason = "refused", message.message
                submission.answered = now()
                return
            if isinstance(message, wire.Heartbeat):
                sock.sendall(wire.encode_pong())
            elif isinstance(message, (wire.Done, wire.Failed)):
                self.state.outcomes += 1


# -- one round -----------------------------------------------------------------------


class Matrix:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.twistd = args.twistd or str(Path(sys.executable).with_name("twistd"))
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    # The worker processes of the current round.

    def start_worker(self, directory: Path, state: Round, until: float) -> str:
        name = f"w{len(self.workers)}"
        self.workers[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tools.crashmatrix",
                "_worker",
                f"--port-file={state.port_file}",
                f"--out={directory / f'{name}.runs'}",
                f"--name={name}",
                f"--until={until}",
                f"--credits={self.args.credits}",
                f"--work-ms={self.args.work_ms}",
                f"--seed={self.rng.randrange(1 << 30)}",
            ],
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),
            env=tools_environment(),
        )
        return name

    def stop_workers(self) -> None:
        stop_all(self.workers.values(), 3)

    def run_round(self, mode: str, number: int, directory: Path) -> RoundResult:
        args, rng = self.args, self.rng
        directory.mkdir(parents=True)
        config = directory / "quicx.conf"
        config.write_text(
            CONFIG.format(
                pool_size=args.pool_size,
                journal=directory / "quicx.journal",
                mode=mode,
            )
        )
        result = RoundResult(mode, number, args.seconds)
        state = Round(number, mode, directory / "port")
        # Its output goes through a pipe: a file size limit hits the journal only.
        daemon = DaemonProcess(directory, [f"--config={config}"], pipe=True, twistd=self.twistd)
        state.daemon = daemon
        self.workers = {}
        producers: list[Producer] = []
        # Everything below is bounded by this, drain included.
        hard_end = now() + args.seconds + args.drain_timeout + 30
        if rng.random() < args.disk_fault_rounds:
            result.file_size_limit = rng.randint(8_000, 120_000)
        try:
            daemon.preexec = die_with_parent(result.file_size_limit)
            state.set_port(daemon.start().port)
            for _ in range(args.workers):
                self.start_worker(directory, state, hard_end)
            started = now()
            producers = [
                Producer(state, i, args.rate / args.producers, rng.randrange(1 << 30), hard_end)
                for i in range(args.producers)
            ]
            for producer in producers:
                producer.start()
            restarted_at = self.kill_round(directory, state, hard_end, started, result)
            # Keep submitting after the restart, so new ids are seen.
            time.sleep(max(0.0, max(started + args.seconds, restarted_at + 1.0) - now()))
            state.stop_submitting.set()
            for producer in producers:
                producer.join(10)
                if producer.error is not None:
                    result.errors.append(f"{producer.name}: {producer.error!r}")
            result.drained = self.drain(daemon.control_path)
        except Exception as e:
            result.errors.append(repr(e))
        finally:
            state.stop_submitting.set()
            self.stop_workers()
            daemon.stop()
            for producer in producers:
                producer.join(5)
        count(state, directory, result, self.args.credits)
        return result

    def kill_round(
        self, directory: Path, state: Round, until: float, started: float, result: RoundResult
    ) -> float:
        """
        The round's kills, at random: the daemon's (then its restart on the
        same journal), whether right after a burst of OKs, and whether (and
        when) a worker's too.  When the daemon was restarted.
        """
        args, rng = self.args, self.rng
        kill_at = rng.uniform(0.25, 0.75) * args.seconds
        after_burst = rng.random() < 0.5
        # Right after the burst, or a little later: 0.1 to 50 ms.
        if rng.random() < 0.7:
            state.kill_delay = 10 ** rng.uniform(-4, -1.3)
        events: list[tuple[float, str]] = [(kill_at, "daemon")]
        if rng.random() < args.worker_kill_rounds:
            events.append((rng.uniform(0.1, 0.9) * args.seconds, "worker"))
        restarted_at = 0.0
        for at, what in sorted(events):
            time.sleep(max(0.0, started + at - now()))
            if what == "worker":
                self.kill_worker(directory, state, until, started, result)
            else:
                restarted_at = self.kill_daemon(state, after_burst, started, result)
        return restarted_at

    def kill_daemon(
        self, state: Round, after_burst: bool, started: float, result: RoundResult
    ) -> float:
        """SIGKILL the daemon, then start it again on its journal: when it was restarted."""
        daemon = state.daemon
        assert daemon is not None
        if after_burst:
            state.kill_armed.set()
            state.killed.wait(2.0)
        if not state.killed.is_set():
            state.kill_daemon("at a random time")
        daemon.kill()
        result.kill_at = round(state.kill_time - started, 3)
        result.kill_by = state.kill_by
        result.journal_broken = "write failed" in daemon.log()
        time.sleep(self.rng.uniform(0.0, 0.3))
        # The same journal, without any file size limit.
        state.epoch = 1
        state.restart_time = now()
        daemon.preexec = die_with_parent()
        state.set_port(daemon.start().port)
        restarted_at = now()
        found = RECOVERED.search(daemon.log())
        result.recovered_tasks = int(found.group(2)) if found else -1
        return restarted_at

    def kill_worker(
        self, directory: Path, state: Round, until: float, started: float, result: RoundResult
    ) -> None:
        live = [name for name, p in self.workers.items() if p.poll() is None]
        if not live:
            return
        name = self.rng.choice(live)
        killed_at = now()
        self.workers[name].kill()
        self.workers[name].wait()  # its file of runs ends here
        replacement = self.start_worker(directory, state, until)
        result.worker_kills.append(
            {
                "worker": name,
                "at": round(killed_at - started, 3),
                "time": killed_at,
                "replaced_by": replacement,
            }
        )

    def drain(self, control: Path) -> bool:
        """Wait for nothing queued or running (twice in a row), within the drain timeout."""
        deadline = time.monotonic() + self.args.drain_timeout
        quiet = 0
        while time.monotonic() < deadline:
            try:
                tasks = fetch_status(str(control), timeout=2.0)["tasks"]
            except StatusUnavailable:
                tasks = None
            if tasks is not None and tasks["queued"] == 0 and tasks["running"] == 0:
                quiet += 1
                if quiet >= 2:
                    # The last DONEs' run records are already written.
                    return True
            else:
                quiet = 0
            time.sleep(0.2)
        return False

    # -- counting --------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.crashmatrix",
        description=(
            "Kill the Quicx daemon (and workers) with SIGKILL under load, for each"
            " journal fsync policy, restart it, and count acknowledged tasks lost,"
            " tasks run twice, refused tasks that ran and task ids reused."
        ),
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds per mode (default 10)")
    parser.add_argument("--modes", default=",".join(MODES), help="fsync policies, comma-separated")
    parser.add_argument(
        "--seconds", type=float, default=4.0, help="load per round, in seconds (default 4)"
    )
    parser.add_argument("--producers", type=int, default=2, help="producer threads (2)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (3)")
    parser.add_argument(
        "--rate", type=float, default=3000, help="SUBMITs per second, all producers (3000)"
    )
    parser.add_argument("--credits", type=int, default=4, help="READY credits per worker (4)")
    parser.add_argument(
        "--work-ms", type=float, default=0.3, help="mean simulated work per task (0.3 ms)"
    )
    parser.add_argument(
        "--pool-size", default="256K", help="the daemon's pool: bounds the queue (256K)"
    )
    parser.add_argument(
        "--worker-kill-rounds",
        type=float,
        default=0.5,
        help="share of rounds that also kill a worker (0.5)",
    )
    parser.add_argument(
        "--disk-fault-rounds",
        type=float,
        default=0.0,
        help=(
            "share of rounds whose first daemon runs under a random file size limit"
            " (RLIMIT_FSIZE), so that journal writes fail (0)"
        ),
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=20.0, help="seconds to drain each round (20)"
    )
    parser.add_argument("--dir", help="keep each round's files here (default: a temp dir)")
    parser.add_argument("--json-out", help="write every figure to this JSON file")
    parser.add_argument("--twistd", help="the twistd to run (default: beside this Python)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: choose among {', '.join(MODES)}")
    args.modes = modes
    for name in ("rounds", "producers", "workers", "credits"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.seconds <= 0 or args.rate <= 0 or args.drain_timeout <= 0:
        parser.error("--seconds, --rate and --drain-timeout must be positive")
    return args


def main(argv: list[str]) -> int:
    if argv[:1] == ["_worker"]:
        return worker_main(argv[1:])
    args = parse_args(argv)
    try:
        load_quicx()
    except ImportError as e:
        print(
            f"tools.crashmatrix: {e}; install quicx (pip install .) and run this with its Python",
            file=sys.stderr,
        )
        return 2
    # A SIGTERM stops the matrix through the finally clauses that stop the
    # daemon and the workers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    matrix = Matrix(args)
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="quicx-crash-"))
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results: dict[str, list[RoundResult]] = {}
    try:
        for mode in args.modes:
            results[mode] = []
            for number in range(args.rounds):
                result = matrix.run_round(mode, number, base / f"{mode}-{number}")
                results[mode].append(result)
                print(
                    f"# {mode} round {number}: killed at {result.kill_at:.2f} s"
                    f" ({result.kill_by}), worker kills {len(result.worker_kills)},"
                    f" acked {result.acked}, lost {result.lost}, run twice"
                    f" {result.run_twice}, refused {result.refused} (ran"
                    f" {result.refused_ran}), ids reused {result.ids_reused}"
                    + (f", ERRORS {result.errors}" if result.errors else "")
                    + ("" if result.drained else ", NOT DRAINED"),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        matrix.stop_workers()
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    totals = [summarize(mode, rs) for mode, rs in results.items()]
    print(table(totals))
    if args.json_out:
        document = {
            "format": "quicx-crashmatrix/1",
            "date": started,
            "command": "python -m tools.crashmatrix " + " ".join(argv),
            "seed": args.seed,
            "settings": {
                k: v for k, v in vars(args).items() if k not in {"json_out", "dir", "twistd"}
            },
            "totals": {t["mode"]: t for t in totals},
            "rounds": {mode: [asdict(r) for r in rs] for mode, rs in results.items()},
        }
        Path(args.json_out).write_text(json.dumps(document, indent=1) + "\n")
    return 1 if any(r.errors for rs in results.values() for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
