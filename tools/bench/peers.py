"""
The peer harness (C{../shared/bench/peers}, beanstalkd): found, set up, run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.launcher import (
    tools_environment,
)


def find_peers(explicit: str | None) -> Path | None:
    """The peer harness: C{--peers}, C{$QUICX_PEERS}, or C{../shared/bench/peers}."""
    for candidate in [explicit, os.environ.get("QUICX_PEERS"), "../shared/bench/peers"]:
        if candidate and (Path(candidate) / "harness" / "core.py").exists():
            return Path(candidate).resolve()
    return None


def peer_python(peers: Path) -> str:
    """The harness's virtualenv, set up as its run_all.sh does (idempotent)."""
    venv = peers.parent / ".venv"
    if shutil.which("beanstalkd") is None:
        raise SystemExit(
            "tools.bench: beanstalkd is missing: install it (apt-get install beanstalkd)"
            " or run with --no-peers"
        )
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "-r",
                str(peers / "requirements.txt"),
            ],
            check=True,
        )
    return str(venv / "bin" / "python")


QUICX_ADAPTER = Path("benchmarks") / "quicx_adapter.py"
"""Quicx as a harness adapter (run from the repository root, with this Python)."""


def peer_run(
    peers: Path, python: str, adapter: str, workload: str, n: int, payload: int = 100
) -> dict[str, Any]:
    """One run of the harness: C{adapter} is a file in its adapters/, or "quicx"."""
    if adapter == "quicx":
        python, script = sys.executable, QUICX_ADAPTER.resolve()
    else:
        script = peers / "adapters" / f"{adapter}.py"
    with tempfile.TemporaryDirectory(prefix="quicx-bench-peer-") as directory:
        out = Path(directory) / "result.json"
        subprocess.run(
            [
                python,
                str(script),
                "bench",
                "--workload",
                workload,
                "--n",
                str(n),
                "--payload-bytes",
                str(payload),
                "--workers",
                "2",
                "--max-seconds",
                "300",
                "--out",
                str(out),
                "--log-dir",
                directory,
            ],
            check=False,
            capture_output=True,
            env={**tools_environment(), "QUICX_PEERS": str(peers)},
        )
        if not out.exists():
            return {"error": "no result"}
        result = json.loads(out.read_text())
    return result.get("result", result)
