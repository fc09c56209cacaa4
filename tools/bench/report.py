"""
The report's workload: C{quicx report} over synthetic lifecycle events.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tools.launcher import (
    QUICX,
)


def synthetic_events(directory: Path, events: int) -> int:
    """Write about C{events} lifecycle events (3 or 4 per task) as NDJSON."""
    from random import Random

    from quicx.daemon.observe.events import format_event

    rng = Random(7)
    written, task, now = 0, 0, 1_795_000_000.0
    path = directory / f"events-20261121T000000-{os.getpid()}-0001.ndjson"
    with path.open("w") as out:
        while written < events:
            task += 1
            now += rng.expovariate(2000)
            kind = b"mail" if task % 3 else b"sms"
            size = rng.randint(20, 400)
            producer, worker = 1 + task % 8, 100 + task % 64
            start = now + rng.expovariate(200)
            end = start + rng.expovariate(50)
            lines: list[tuple[Any, ...]] = [
                (now, "submitted", task, kind, size, producer, None, 0, None),
                (start, "dispatched", task, kind, size, producer, worker, 1, None),
            ]
            if task % 20:
                lines.append((end, "done", task, kind, size, producer, worker, 1, None))
            else:
                reason = "over quota" if task % 40 else "bad address"
                lines.append((end, "failed", task, kind, size, producer, worker, 1, reason))
            queue = "mail" if task % 3 else "sms"
            out.writelines(format_event((*line, queue, task % 3)) + "\n" for line in lines)
            written += len(lines)
    return written


def report_workload(events: int) -> dict[str, Any]:
    """Run time of C{quicx report} over C{events} synthetic events (local[*])."""
    with tempfile.TemporaryDirectory(prefix="quicx-bench-report-") as directory:
        source = Path(directory) / "events"
        source.mkdir()
        written = synthetic_events(source, events)
        started = time.perf_counter()
        subprocess.run(
            [QUICX, "report", str(source), f"--out={Path(directory) / 'out'}"],
            check=True,
            capture_output=True,
        )
        seconds = time.perf_counter() - started
    return {"events": written, "seconds": seconds, "events_per_s": written / seconds}
