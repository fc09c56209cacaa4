"""
One shard for one row: etcd (when replicated), the daemons, and the proxies
between them that the faults cut.

Each daemon C{N} has three proxies (L{tools.failover.proxy}):

- C{N.clients}: clients → the daemon's client port (C{[replication]
  client_address} names it, so C{ERROR 0x0C} sends clients through it);
- C{N.replication}: the shard's peers → its replication listener
  (C{advertise} names it: a standby reaches its primary through the
  primary's);
- C{N.etcd}: the daemon → etcd (its C{[replication] etcd} URL).

A partition "primary ↔ etcd" cuts the primary's C{etcd} proxy, "primary ↔
standby" its C{replication} proxy, "clients ↔ primary" its C{clients} proxy.
Without replication (C{replicated=False}: the dry run on what exists before
it) a shard is one daemon at C{fsync = always} behind its C{clients} proxy.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attrs import define, field

from tools.etcd import free_ports
from tools.failover.proxy import Proxy
from tools.failover.trace import DOWN, PRIMARY
from tools.launcher import DaemonProcess

ROLES = frozenset({"primary", "standby", "candidate", "fenced"})
"""The roles a daemon's status may name (L{quicx.daemon.replication.interfaces.RoleState})."""
SHARD = "matrix"


def replication_available() -> bool:
    """Whether this quicx declares the C{[replication]} settings section."""
    from quicx.daemon.config import declarations

    return "replication" in declarations.SECTIONS


@define(frozen=True)
class ShardConfig:
    """
    What the row's shard is: C{daemons} (1 without replication), and the
    C{[replication]} settings it runs under (the defaults but C{standby_lost}).
    """

    replicated: bool = True
    daemons: int = 2
    mode: str = "sync"
    standby_lost: str = "wait"
    lease_ttl: float = 5.0
    standby_timeout: float = 2.0
    fsync: str = "always"
    journal_tmpfs: int = 0
    """Bytes of a tmpfs mounted for each standby's journal directory (0: none)."""
    task_timeout: float = 0.0
    """C{[tasks] timeout}: a worker's lease on a task (0: none, the default)."""

    def describe(self) -> str:
        if not self.replicated:
            return f"single daemon, fsync={self.fsync}"
        return f"{self.daemons} daemons, {self.mode}, standby_lost={self.standby_lost}"


def role_of(document: Any, replicated: bool) -> str:
    """
    The role a status document names: the first C{"role"} key, at any depth,
    whose value is one of L{ROLES}; without one, a daemon without replication
    is its own primary, and a replicated one is C{unknown}.
    """
    stack = [document]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            if isinstance(role := item.get("role"), str) and role in ROLES:
                return role
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return "unknown" if replicated else PRIMARY


@define(eq=False)
class Node:
    """One daemon of the shard, its directory, its ports and its proxies."""

    name: str
    directory: Path
    client_port: int
    replication_port: int
    clients: Proxy
    replication: Proxy
    etcd: Proxy | None
    daemon: DaemonProcess
    mounted: bool = False
    held: bool = False
    """Down on purpose (a fault killed it): the supervisor leaves it be."""
    lock: threading.Lock = field(factory=threading.Lock)

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """Within: the supervisor does not restart it (a fault kills and restarts it)."""
        with self.lock:
            self.held = True
        try:
            yield
        finally:
            with self.lock:
                self.held = False

    @property
    def journal_dir(self) -> Path:
        return self.directory / "journal"

    @property
    def address(self) -> str:
        """Where clients reach it: its C{clients} proxy."""
        return f"tcp:{self.clients.address}"

    def config(self, shard: ShardConfig, etcd_url: str) -> str:
        lines = [
            "[server]",
            f"listen = tcp:{self.client_port}:interface=127.0.0.1",
            "drain_timeout = 0",
            "heartbeat_interval = 1",
            "heartbeat_timeout = 10",
            "[journal]",
            f"path = {self.journal_dir / 'quicx.journal'}",
            f"fsync = {shard.fsync}",
        ]
        if shard.task_timeout:
            lines += ["[tasks]", f"timeout = {shard.task_timeout:g}"]
        if shard.replicated:
            lines += [
                "[replication]",
                f"etcd = {etcd_url}",
                f"shard = {SHARD}",
                f"name = {self.name}",
                f"listen = tcp:{self.replication_port}:interface=127.0.0.1",
                f"advertise = {self.replication.address}",
                f"client_address = {self.clients.address}",
                f"lease_ttl = {shard.lease_ttl:g}",
                f"mode = {shard.mode}",
                f"standby_lost = {shard.standby_lost}",
                f"standby_timeout = {shard.standby_timeout:g}",
            ]
        return "\n".join(lines) + "\n"

    def role(self, replicated: bool, timeout: float = 1.0) -> str:
        """What its status says it is; L{DOWN} if it does not answer within C{timeout}."""
        from quicx.daemon.control import StatusUnavailable, fetch_status

        if not self.daemon.alive():
            return DOWN
        try:
            return role_of(fetch_status(str(self.daemon.control_path), timeout), replicated)
        except StatusUnavailable:
            return DOWN

    def pause(self) -> None:
        os.kill(self.daemon.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.daemon.pid, signal.SIGCONT)

    def wipe(self) -> None:
        """Its data gone (a replacement machine): the journal directory emptied."""
        assert not self.daemon.alive()
        for entry in self.journal_dir.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


@define(eq=False)
class Shard:
    """
    The row's shard, started by L{start} and stopped by L{close} (a context
    manager does both); C{directory} holds every file of it.
    """

    directory: Path
    config: ShardConfig
    nodes: list[Node] = field(factory=list)
    etcd: Any = None
    """The running etcd (C{tools.etcd.Etcd}: C{url}, C{kill()}, C{stop()}), when replicated."""
    etcd_ports: tuple[int, int] = (0, 0)
    restarts: list[str] = field(factory=list)
    """What the supervisor did: each daemon it found exited, and restarted."""
    _supervising: threading.Event = field(init=False, factory=threading.Event)
    _supervisor: threading.Thread | None = field(init=False, default=None)

    @property
    def addresses(self) -> list[str]:
        return [node.address for node in self.nodes]

    def __enter__(self) -> Shard:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> Shard:
        count = self.config.daemons if self.config.replicated else 1
        ports = iter(free_ports(2 + 5 * count))
        self.etcd_ports = (next(ports), next(ports))
        if self.config.replicated:
            self.start_etcd()
        for n in range(count):
            self.nodes.append(self._node(f"d{n + 1}", ports))
        for node in self.nodes:
            self.start_node(node)
            if node is self.nodes[0]:
                self.wait_primary()
            else:
                self.wait_role(node, "standby")
        self._supervisor = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._supervisor.start()
        return self

    def _supervise(self) -> None:
        """
        Restart every daemon that exits unless a fault holds it down, as
        systemd's C{Restart=on-failure} would: a demoted primary leaves (exit
        status 75) to start again as a standby.
        """
        while not self._supervising.wait(0.2):
            for node in self.nodes:
                with node.lock:
                    process = node.daemon.process
                    if node.held or process is None or process.poll() is None:
                        continue
                    self.restarts.append(f"{node.name} exited with {process.returncode}")
                    node.daemon.start(timeout=60.0)

    def _node(self, name: str, ports: Any) -> Node:
        directory = self.directory / name
        (directory / "journal").mkdir(parents=True)
        client_port, replication_port = next(ports), next(ports)
        proxies = {
            kind: Proxy(f"{name}.{kind}", next(ports), target, directory / f"{kind}.proxy")
            for kind, target in (
                ("clients", f"127.0.0.1:{client_port}"),
                ("replication", f"127.0.0.1:{replication_port}"),
                ("etcd", f"127.0.0.1:{self.etcd_ports[0]}"),
            )
        }
        for proxy in proxies.values():
            proxy.start(directory / "proxies.log")
        config = directory / "quicx.conf"
        node = Node(
            name,
            directory,
            client_port,
            replication_port,
            proxies["clients"],
            proxies["replication"],
            proxies["etcd"],
            DaemonProcess(directory, ["--config", str(config)]),
        )
        config.write_text(node.config(self.config, f"http://{proxies['etcd'].address}"))
        return node

    def start_node(self, node: Node) -> None:
        if self.config.journal_tmpfs and node is not self.nodes[0] and not node.mounted:
            size = self.config.journal_tmpfs
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(node.journal_dir)],
                check=True,
            )
            node.mounted = True
        node.daemon.start(timeout=60.0)

    def start_etcd(self) -> None:
        # tools.etcd comes with the replication it serves (issue 34): imported when used.
        etcd = importlib.import_module("tools.etcd")
        self.etcd = etcd.start_etcd(self.directory / "etcd", *self.etcd_ports)

    def roles(self) -> dict[str, str]:
        return {node.name: node.role(self.config.replicated) for node in self.nodes}

    def wait_primary(self, timeout: float = 60.0, other_than: Node | None = None) -> Node:
        """The node that says it is primary (not C{other_than}), once one does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node is not other_than and node.role(self.config.replicated) == PRIMARY:
                    return node
            time.sleep(0.1)
        raise RuntimeError(f"no primary within {timeout:g} s: {self.roles()}")

    def wait_role(self, node: Node, role: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while (found := node.role(self.config.replicated)) != role:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node.name} is {found}, not {role}, after {timeout:g} s")
            time.sleep(0.1)

    def close(self) -> None:
        self._supervising.set()
        if self._supervisor is not None:
            self._supervisor.join(90)
        for node in self.nodes:
            with contextlib.suppress(ProcessLookupError, AssertionError):
                node.resume()  # a SIGSTOPped daemon does not stop on SIGTERM
            node.daemon.stop()
            for proxy in (node.clients, node.replication, node.etcd):
                if proxy is not None:
                    proxy.stop()
            if node.mounted:
                subprocess.run(["umount", "-l", str(node.journal_dir)], check=False)
                node.mounted = False
        if self.etcd is not None:
            self.etcd.stop()
