"""
Start and stop a one-member etcd (Debian's C{etcd-server}) on loopback: the
lease store of the replication tests, the benchmarks and the failover matrix.

It imports nothing from quicx.  The member's data directory and its log
(C{etcd.log}, appended to across restarts) lie in the directory it is given:
L{start_etcd} on a directory that already holds a member restarts that
member, with its keys (a kill -9 of etcd, then a restart, is a matrix row).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from attrs import define

ETCD = os.environ.get("QUICX_ETCD", "/usr/bin/etcd")
"""The etcd binary (Debian's C{etcd-server} 3.4 installs it there)."""
LOG_NAME = "etcd.log"


class EtcdStartError(RuntimeError):
    """etcd exited, or did not answer healthy in time: the message ends with its log's tail."""


@define
class Etcd:
    """
    A running etcd member.

    @ivar url: its client URL (C{http://127.0.0.1:PORT}), what C{[replication] etcd} names.
    """

    url: str
    client_port: int
    data_dir: Path
    process: subprocess.Popen[bytes]

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL it and wait for it to be gone."""
        self._signal(signal.SIGKILL, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM it and wait for it to exit (SIGKILL if it has not within C{timeout})."""
        self._signal(signal.SIGTERM, timeout)

    def alive(self) -> bool:
        return self.process.poll() is None

    def _signal(self, signum: int, timeout: float) -> None:
        if self.alive():
            self.process.send_signal(signum)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_ports(count: int) -> list[int]:
    """
    C{count} distinct loopback ports free now (etcd binds its own sockets,
    so another process may still take one before it does: L{start_etcd}
    then fails with "address already in use" in its message).
    """
    probes = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            probes.append(probe)
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def etcd_command(name: str, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    """The command line of a one-member cluster on loopback."""
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        ETCD,
        f"--name={name}",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={name}={peer}",
        "--initial-cluster-state=new",
        f"--initial-cluster-token={name}",
        "--logger=zap",
        "--log-outputs=stderr",
    ]


def healthy(url: str, timeout: float = 2.0) -> bool:
    """Whether C{GET url/health} answers C{{"health": "true"}}."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as answer:
            return bool(json.loads(answer.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def listens(pid: int, port: int) -> bool:
    """
    Whether process C{pid} itself holds a socket listening on C{port} (not
    another etcd already there, which would answer C{/health} for it).
    """
    try:
        links = [os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()]
        table = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    inodes = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    for row in table:
        fields = row.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A" and fields[9] in inodes:
            return True
    return False


def log_tail(directory: Path, lines: int = 30) -> str:
    path = directory / LOG_NAME
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def start_etcd_on_free_ports(directory: Path, timeout: float = 60.0, tries: int = 3) -> Etcd:
    """
    L{start_etcd} on ports free now, on other ones if another process took
    one of them before etcd bound it.
    """
    for _ in range(tries - 1):
        client_port, peer_port = free_ports(2)
        try:
            return start_etcd(directory, client_port, peer_port, timeout)
        except EtcdStartError as error:
            if "address already in use" not in str(error):
                raise
    client_port, peer_port = free_ports(2)
    return start_etcd(directory, client_port, peer_port, timeout)


def start_etcd(
    directory: Path,
    client_port: int,
    peer_port: int,
    timeout: float = 60.0,
    name: str = "quicx-test",
) -> Etcd:
    """
    Start (or restart, if C{directory} holds its data already) a one-member
    etcd on 127.0.0.1, and wait until it answers healthy.

    @raise EtcdStartError: it exited or was not healthy within C{timeout}
        seconds (it is killed then); the message ends with its log's tail.
    """
    directory.mkdir(parents=True, exist_ok=True)
    data_dir = directory / f"{name}.etcd"
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ETCD")}
    with open(directory / LOG_NAME, "ab") as log:
        process = subprocess.Popen(
            etcd_command(name, data_dir, client_port, peer_port),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    etcd = Etcd(f"http://127.0.0.1:{client_port}", client_port, data_dir, process)
    deadline = time.monotonic() + timeout
    while not (listens(process.pid, client_port) and healthy(etcd.url)):
        if not etcd.alive() or time.monotonic() > deadline:
            why = (
                f"exited with {process.returncode}"
                if not etcd.alive()
                else f"not healthy within {timeout:g} s"
            )
            etcd.kill()
            raise EtcdStartError(
                f"etcd on port {client_port} {why}; its log ends:\n{log_tail(directory)}"
            )
        time.sleep(0.05)
    return etcd
