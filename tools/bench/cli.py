"""
The command: C{python -m tools.bench [WORKLOAD...]}, its flags, and the
processes a workload starts (L{HELPERS}).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

from quicx import __version__
from tools.bench import targets
from tools.bench.delays import (
    delays_worker,
)
from tools.bench.openloop import openloop_producer
from tools.bench.peers import find_peers, peer_python
from tools.bench.runs import RUNS, WORKLOADS, Session
from tools.bench.scale import (
    scale_producer,
)
from tools.bench.throughput import (
    fanin_producer,
)
from tools.launcher import (
    DaemonError,
)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description="Quicx benchmark (see docs/performance.md)"
    )
    parser.add_argument("workloads", nargs="*", help=f"any of {', '.join(WORKLOADS)}")
    parser.add_argument("--quick", action="store_true", help="smaller N everywhere")
    parser.add_argument("--peers", metavar="DIR", help="the peer harness (../shared/bench/peers)")
    parser.add_argument("--no-peers", action="store_true", help="Quicx only")
    parser.add_argument("--json-out", metavar="FILE", help="write every result here")
    parser.add_argument(
        "--targets-from",
        metavar="FILE",
        help="print issue 35's targets table from an earlier run's --json-out, and stop",
    )
    parser.add_argument("--journal-dir", default=".", help="where the journal workload writes")
    parser.add_argument(
        "--chart",
        metavar="FILE",
        default="docs/openloop.svg",
        help="where the openloop workload writes its chart (docs/openloop.svg; '' for none)",
    )
    parser.add_argument(
        "--delays-dispatch",
        type=int,
        metavar="N",
        help="tasks due in the same second (delays workload; 100,000 unless --quick)",
    )
    parser.add_argument(
        "--delays-memory",
        type=int,
        metavar="M",
        help="tasks held for the memory figures (delays workload; 1,000,000 unless --quick)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    if any(count is not None and count < 1 for count in (args.delays_dispatch, args.delays_memory)):
        command.error("--delays-dispatch and --delays-memory count tasks: 1 or more")
    if args.targets_from:
        print(targets.from_file(args.targets_from))
        return 0
    # Absolute: each daemon runs in its own temporary directory.
    journal_dir = Path(args.journal_dir).resolve()
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        command.error(f"unknown workload {', '.join(sorted(unknown))}")
    chosen = args.workloads or [w for w in WORKLOADS if w != "journal"]
    peers = None if args.no_peers else find_peers(args.peers)
    session = Session(args, peers, peer_python(peers) if peers else "", journal_dir)
    print(
        f"Quicx {__version__} benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
        f" {platform.machine()} x{os.cpu_count()}, Python {platform.python_version()},"
        f" peers: {peers or 'none'}",
        flush=True,
    )
    try:
        for workload in chosen:
            RUNS[workload](session)
    except DaemonError as e:
        raise SystemExit(f"tools.bench: the daemon did not start: {e}") from None
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(session.table, indent=2) + "\n")
    found = targets.rows(session.table)
    if found:
        print("\nIssue 35's targets, from this run:\n" + targets.markdown(found), flush=True)
    return 0


HELPERS: dict[str, Callable[[str, int, int], None]] = {
    "_fanin": fanin_producer,
    "_delays_worker": delays_worker,
    "_scale": scale_producer,
    "_openloop": openloop_producer,
}
"""The processes a workload starts: C{python -m tools.bench NAME ADDRESS INT INT}."""
