"""The failover matrix's reading of roles, its configs and its following of the primary."""

from __future__ import annotations

from pathlib import Path

from tools.failover.load import Follower
from tools.failover.proxy import Proxy
from tools.failover.shard import Node, ShardConfig, role_of
from tools.launcher import DaemonProcess


def test_the_role_is_found_at_any_depth() -> None:
    assert role_of({"replication": {"role": "standby", "epoch": 4}}, True) == "standby"
    assert role_of({"daemon": [{"x": 1}, {"role": "fenced"}]}, True) == "fenced"


def test_other_roles_named_role_are_passed_over() -> None:
    # [tls] role lists, a worker's "role": not the daemon's.
    document = {"tls": {"role": "admin"}, "replication": {"role": "primary"}}
    assert role_of(document, True) == "primary"


def test_without_a_role_a_single_daemon_is_its_own_primary() -> None:
    assert role_of({"tasks": {"completed": 3}}, False) == "primary"
    assert role_of({"tasks": {"completed": 3}}, True) == "unknown"


def node(tmp_path: Path) -> Node:
    def proxy(kind: str, port: int) -> Proxy:
        return Proxy(kind, port, "127.0.0.1:1", tmp_path / kind)

    return Node("d2", tmp_path, 7002, 7102, proxy("clients", 7202), proxy("replication", 7302),
                proxy("etcd", 7402), DaemonProcess(tmp_path))  # fmt: skip


def test_a_replicated_daemon_is_reached_through_its_proxies(tmp_path: Path) -> None:
    text = node(tmp_path).config(ShardConfig(standby_lost="async"), "http://127.0.0.1:7402")
    assert "[replication]" in text
    assert "etcd = http://127.0.0.1:7402" in text
    assert "listen = tcp:7102:interface=127.0.0.1" in text
    assert "advertise = 127.0.0.1:7302" in text
    assert "client_address = 127.0.0.1:7202" in text
    assert "standby_lost = async" in text
    assert "fsync = always" in text


def test_a_single_daemon_has_no_replication_section(tmp_path: Path) -> None:
    text = node(tmp_path).config(ShardConfig(replicated=False), "")
    assert "[replication]" not in text
    assert "listen = tcp:7002:interface=127.0.0.1" in text


def test_the_follower_goes_where_not_primary_says_else_to_the_next() -> None:
    follower = Follower(["tcp:127.0.0.1:1", "tcp:127.0.0.1:2"])
    assert follower.current == "tcp:127.0.0.1:1"
    follower.redirect("127.0.0.1:9")
    assert follower.current == "tcp:127.0.0.1:9"
    follower.redirect("")
    assert follower.current == "tcp:127.0.0.1:2"
    follower.rotate()
    assert follower.current == "tcp:127.0.0.1:1"
