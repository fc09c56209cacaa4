"""
C{python -m tools.failover}: run the matrix's rows, print the table, and
with C{--json-out} write every figure, with C{--write-docs} the table into
docs/operations.md.  It exits 1 when a row that ran missed a target or
could not run to its end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

from attrs import evolve

from tools.failover import netns
from tools.failover.report import as_json, table, write_docs
from tools.failover.rows import BY_NAME, ROWS, Row, RowResult, run_row
from tools.failover.shard import replication_available
from tools.failover.throughput import Throughput, compare


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.failover", description=__doc__)
    parser.add_argument(
        "--rows",
        default=",".join(r.name for r in ROWS),
        help="comma-separated rows (default: all): " + ", ".join(BY_NAME),
    )
    parser.add_argument(
        "--single",
        action="store_true",
        help="a single daemon at fsync = always, no replication (the dry run)",
    )
    parser.add_argument(
        "--daemons", type=int, default=2, help="daemons in each replicated shard (2 or 3)"
    )
    parser.add_argument(
        "--rate", type=float, default=40.0, help="SUBMITs per second of each of the 2 producers"
    )
    parser.add_argument(
        "--throughput-seconds",
        type=float,
        default=3.0,
        help="seconds of each throughput round (0: not measured)",
    )
    parser.add_argument(
        "--directory", type=Path, help="where the shards' files go (default: a temporary directory)"
    )
    parser.add_argument("--json-out", type=Path, help="write every figure here as JSON")
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="write the table into docs/operations.md between its markers",
    )
    parser.add_argument(
        "--no-isolate",
        action="store_true",
        help="run on the machine's loopback, not in a private namespace",
    )
    args = parser.parse_args(argv)
    unknown = set(args.rows.split(",")) - set(BY_NAME)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if not args.no_isolate:
        netns.isolate("tools.failover", argv)
        if not netns.isolated():
            print("tools.failover: no private namespace here (unshare): on 127.0.0.1's"
                  " ephemeral ports", file=sys.stderr)  # fmt: skip
    replicated = replication_available() and not args.single
    with tempfile.TemporaryDirectory(prefix="quicx-failover-") as scratch:
        directory = args.directory or Path(scratch)
        results = [run(BY_NAME[name], directory, replicated, args.rate, args.daemons)
                   for name in args.rows.split(",")]  # fmt: skip
        figures: Throughput | None = None
        if args.throughput_seconds > 0:
            figures = compare(directory / "throughput", replicated, args.throughput_seconds)
    text = table(results, figures)
    print(text)
    if args.json_out:
        args.json_out.write_text(json.dumps(as_json(results, figures), indent=2) + "\n")
    if args.write_docs:
        write_docs(text)
    return 1 if any(r.misses() for r in results) else 0


def run(row: Row, directory: Path, replicated: bool, rate: float, daemons: int) -> RowResult:
    """One row, an exception in it reported as its error (the others still run)."""
    print(f"tools.failover: {row.name} ...", file=sys.stderr, flush=True)
    try:
        result = run_row(evolve(row, config=evolve(row.config, daemons=daemons)),
                         directory / row.name, replicated, rate)  # fmt: skip
    except Exception as e:  # a row that cannot run is a result too
        traceback.print_exc()
        shard = "replicated" if replicated else "single daemon"
        return RowResult(row.name, shard, error=f"{type(e).__name__}: {e}".splitlines()[0])
    for note in result.notes:
        print(f"  {note}", file=sys.stderr)
    return result
