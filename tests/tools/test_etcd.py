"""tools/etcd.py: a real one-member etcd, started, restarted with its keys, or failing to start."""

from __future__ import annotations

import base64
import json
import socket
import urllib.request
from pathlib import Path

import pytest

from tools.etcd import ETCD, Etcd, EtcdStartError, free_ports, healthy, start_etcd


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def call(etcd: Etcd, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(f"{etcd.url}{path}", json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        result: dict[str, object] = json.loads(answer.read())
        return result


def test_a_member_killed_and_started_again_on_its_directory_keeps_its_keys(
    etcd: Etcd, tmp_path: Path
) -> None:
    assert healthy(etcd.url)
    call(etcd, "/v3/kv/put", {"key": b64("/k"), "value": b64("v")})
    etcd.kill()
    assert not etcd.alive()
    assert not healthy(etcd.url, timeout=0.5)
    peer_port = free_ports(1)[0]
    again = start_etcd(tmp_path / "etcd", etcd.client_port, peer_port)
    try:
        assert again.data_dir == etcd.data_dir
        kvs = call(again, "/v3/kv/range", {"key": b64("/k")})["kvs"]
        assert isinstance(kvs, list) and base64.b64decode(kvs[0]["value"]) == b"v"
    finally:
        again.stop()
    assert again.process.returncode is not None


def test_a_start_on_a_taken_port_raises_with_the_log_tail(tmp_path: Path) -> None:
    if not Path(ETCD).exists():
        pytest.skip(f"no {ETCD}: apt-get install etcd-server")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(EtcdStartError, match="address already in use"):
            start_etcd(tmp_path, taken.getsockname()[1], free_ports(1)[0], timeout=30)
