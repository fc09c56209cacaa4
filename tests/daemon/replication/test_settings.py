"""[replication]: its settings, their defaults, and the errors that name key and line."""

from __future__ import annotations

import pytest

from quicx.daemon import config
from quicx.daemon.config import ConfigError
from quicx.daemon.config.sections import ReplicationMode, ReplicationSettings, StandbyLost

SHARD = """\
[journal]
path = /var/lib/quicx/quicx.journal

[replication]
etcd = http://10.0.0.5:2379, http://10.0.0.6:2379
shard = orders
name = q1
listen = tcp:16400
advertise = 10.0.0.1:16400
client_address = 10.0.0.1:16381
lease_ttl = 4
mode = async
standby_lost = async
standby_timeout = 1.5
max_backlog = 16MiB
key_prefix = /quicx/prod/
"""


def test_without_the_section_replication_is_off() -> None:
    loaded = config.parse("", "f")
    assert loaded.replication == ReplicationSettings()
    assert not loaded.replication.enabled
    assert loaded.replication.mode is ReplicationMode.SYNC
    assert loaded.replication.standby_lost is StandbyLost.WAIT


def test_a_shard_member_reads_every_key() -> None:
    replication = config.parse(SHARD, "f").replication
    assert replication.enabled
    assert replication.endpoints == ("http://10.0.0.5:2379", "http://10.0.0.6:2379")
    assert (replication.shard, replication.member, replication.listen) == (
        "orders",
        "q1",
        "tcp:16400",
    )
    assert replication.advertise == "10.0.0.1:16400"
    assert replication.client(("tcp:16381",)) == "10.0.0.1:16381"
    assert replication.lease_ttl == 4.0
    assert replication.mode is ReplicationMode.ASYNC
    assert replication.standby_lost is StandbyLost.ASYNC
    assert replication.standby_timeout == 1.5
    assert replication.max_backlog == 16 << 20
    assert replication.key_prefix == "/quicx/prod"


def test_the_defaults_of_name_and_client_address() -> None:
    import socket

    replication = ReplicationSettings(etcd="http://127.0.0.1:2379")
    assert replication.member == socket.gethostname()
    assert replication.client(("tcp:17000:interface=127.0.0.1",)) == "127.0.0.1:17000"
    everywhere = ("unix:/q.sock", "tcp:port=17001:interface=0.0.0.0")
    assert replication.client(everywhere) == "127.0.0.1:17001"
    assert replication.client(("tcp:17002:interface=10.1.2.3",)) == "10.1.2.3:17002"
    assert replication.client(("tcp:0", "unix:/q.sock")) == ""


def test_a_shard_member_round_trips_through_render() -> None:
    loaded = config.parse(SHARD, "f")
    assert config.parse(config.render(loaded), "f").replication == loaded.replication


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "[journal]\npath = j\n[replication]\netcd = http://127.0.0.1:2379\n",
            "f:4: [replication] etcd needs listen",
        ),
        (
            "[replication]\netcd = http://127.0.0.1:2379\nlisten = tcp:16400\n",
            "f:2: [replication] etcd needs [journal] path",
        ),
        (
            "[server]\nlisten = tcp:0\n[journal]\npath = j\n[replication]\n"
            "etcd = http://127.0.0.1:2379\nlisten = tcp:16400\n",
            "f:6: [replication] etcd needs client_address",
        ),
        ("[replication]\nmode = quorum\n", "f:2: mode: 'quorum' is not one of sync, async"),
        (
            "[replication]\nstandby_lost = drop\n",
            "f:2: standby_lost: 'drop' is not one of wait, async",
        ),
        ("[replication]\netcd = 127.0.0.1:2379\n", "f:2: etcd: '127.0.0.1:2379' is not an http"),
        ("[replication]\nadvertise = somewhere\n", "f:2: advertise: 'somewhere' is not HOST:PORT"),
        ("[replication]\nclient_address = h:0\n", "f:2: client_address: 'h:0' is not HOST:PORT"),
        ("[replication]\nshard = a/b\n", "f:2: shard: 'a/b' is not 1 to 64 of"),
        ("[replication]\nkey_prefix = quicx\n", "f:2: key_prefix: 'quicx' is not a key prefix"),
        ("[replication]\nlease_ttl = 0.5\n", "f:2: lease_ttl: 0.5 seconds is out of range"),
        ("[replication]\nmax_backlog = 1K\n", "f:2: max_backlog:"),
    ],
)
def test_errors_name_the_key_and_line(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config.parse(text, "f")
    assert str(raised.value).startswith(error), str(raised.value)


def test_an_escaped_ipv6_interface_is_read_whole() -> None:
    replication = ReplicationSettings(etcd="http://127.0.0.1:2379")
    assert replication.client(("tcp6:17003:interface=\\:\\:1",)) == "[::1]:17003"
    assert replication.client(("tcp:17004:interface=\\:\\:",)) == "127.0.0.1:17004"
