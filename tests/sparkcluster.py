"""
A real Spark standalone cluster on loopback for the tests: one master and one
worker, started from the scripts inside the installed C{pyspark} package
(C{bin/spark-class}), on ports the kernel picks, with little memory.

Each daemon runs in a session of its own, and so do the executors and Python
workers the worker starts for an application (they are its children); on
L{StandaloneCluster.stop} every process of each session is sent SIGTERM, then
SIGKILL, and L{StandaloneCluster.leftovers} lists any still alive.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

START_TIMEOUT = 180.0
"""Seconds for a daemon to be up (a JVM's start on a loaded machine is slow)."""
STOP_TIMEOUT = 20.0


class StandaloneCluster:
    """A master and a worker; L{url} is the master's C{spark://} URL."""

    def __init__(self, directory: Path, cores: int = 2, memory: str = "1g") -> None:
        pyspark = pytest.importorskip("pyspark", reason="pip install 'quicx[spark]'")
        self.home = Path(pyspark.__file__).parent
        self.directory = directory
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            # No fixed ports: the REST submission server would take 6066.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_WORKER_DIR": str(directory / "work"),
        }
        self.processes: list[subprocess.Popen[bytes]] = []
        try:
            master = self._start(
                "master",
                "org.apache.spark.deploy.master.Master",
                ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
                r"Starting Spark master at (spark://\S+)",
            )
            self.url = master.group(1)
            self._start(
                "worker",
                "org.apache.spark.deploy.worker.Worker",
                [self.url, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                 "--cores", str(cores), "--memory", memory],
                r"Successfully registered with master",
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, main: str, arguments: list[str], ready: str) -> re.Match[str]:
        """Start daemon C{name}; the match of C{ready} in its log, once it is there."""
        log = self.directory / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(self.home / "bin" / "spark-class"), main, *arguments],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.processes.append(process)
        deadline = time.monotonic() + START_TIMEOUT
        while not (found := re.search(ready, log.read_text(errors="replace"))):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark {name} did not start:\n{self.log(name)}")
            time.sleep(0.2)
        return found

    def log(self, name: str) -> str:
        """The end of daemon C{name}'s log."""
        return (self.directory / f"{name}.log").read_text(errors="replace")[-3000:]

    def leftovers(self) -> list[int]:
        """The processes of the daemons' sessions still alive (executors included)."""
        return [pid for process in self.processes for pid in _members(process.pid)]

    def stop(self) -> None:
        """
        SIGTERM to every process of each daemon's session (the worker's
        executors and their Python workers are in it), then SIGKILL to any
        left after L{STOP_TIMEOUT} seconds.
        """
        for process in reversed(self.processes):  # the worker first, then the master
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in _members(process.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                deadline = time.monotonic() + STOP_TIMEOUT
                while _members(process.pid) and time.monotonic() < deadline:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(0.2)
                if not _members(process.pid):
                    break
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_TIMEOUT)


def _members(session: int) -> list[int]:
    """The live processes of C{session} (read from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # After the command's closing parenthesis: state, ppid, pgrp, session.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            members.append(int(entry.name))
    return members
