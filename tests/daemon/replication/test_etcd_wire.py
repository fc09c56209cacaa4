"""The etcd gateway's requests and answers (quicx/daemon/replication/etcd_wire.py), without etcd."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

import pytest

from quicx.daemon.replication import etcd_wire as wire
from quicx.daemon.replication.interfaces import History, Leader

KEYS = wire.shard_keys("/quicx/", "default")
ME = Leader("a", "127.0.0.1:1", "127.0.0.1:2")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def answer(fields: Mapping[str, object]) -> bytes:
    return json.dumps(fields).encode()


def test_the_shard_keys() -> None:
    assert wire.shard_keys("/quicx", "default") == KEYS
    assert (KEYS.leader, KEYS.history) == (b"/quicx/default/leader", b"/quicx/default/history")


def test_endpoints_are_http_urls_with_a_port() -> None:
    assert wire.endpoints(" http://a:1/ ,http://b:2,") == ["http://a:1", "http://b:2"]
    for bad in ("", " , ", "https://a:1", "a:1", "http://a", "http://a:x", "http://a:1/v3"):
        with pytest.raises(ValueError):
            wire.endpoints(bad)


def test_a_leader_and_a_history_go_through_their_values() -> None:
    assert wire.decode_leader(wire.encode_leader(ME), 7) == Leader(
        "a", "127.0.0.1:1", "127.0.0.1:2", 7
    )
    history = History(7, "a", frozenset({"c", "b"}))
    assert wire.decode_history(wire.encode_history(history)) == history
    assert json.loads(wire.encode_history(history))["in_sync"] == ["b", "c"]


@pytest.mark.parametrize(
    "value",
    [b"", b"[]", b'{"name": "a"}', b'{"name": 1, "client": "", "replication": ""}', b"\xff"],
)
def test_a_leader_value_that_is_not_one_is_an_error(value: bytes) -> None:
    with pytest.raises(wire.EtcdError, match="holds no leader"):
        wire.decode_leader(value, 1)


@pytest.mark.parametrize(
    "value",
    [
        b"{}",
        b'{"epoch": "1", "primary": "a", "in_sync": []}',
        b'{"epoch": 1, "primary": "a", "in_sync": [1]}',
    ],
)
def test_a_history_value_that_is_not_one_is_an_error(value: bytes) -> None:
    with pytest.raises(wire.EtcdError, match="holds no history"):
        wire.decode_history(value)


def test_a_grant_rounds_the_ttl_up_to_whole_seconds() -> None:
    assert wire.grant_request(2.5) == {"TTL": "3"}
    assert wire.grant_request(0.2) == {"TTL": "1"}
    assert (
        wire.granted(answer({"header": {}, "ID": "8616127285805206534", "TTL": "5"}))
        == 8616127285805206534
    )


def test_a_campaign_puts_the_leader_only_where_there_is_none() -> None:
    request = wire.campaign_request(KEYS, ME, 42)
    assert request["compare"] == [
        {"key": b64(KEYS.leader), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
    ]
    put = request["success"][0]["request_put"]
    assert (put["key"], put["lease"]) == (b64(KEYS.leader), "42")
    assert wire.decode_leader(base64.b64decode(put["value"]), 0) == ME
    assert request["failure"] == [{"request_range": {"key": b64(KEYS.leader)}}]


def leader_kv(lease: int) -> dict[str, str]:
    value = b64(wire.encode_leader(ME))
    return {"key": b64(KEYS.leader), "create_revision": "9", "value": value, "lease": str(lease)}


def held(lease: int) -> bytes:
    found = {"response_range": {"kvs": [leader_kv(lease)], "count": "1"}}
    return answer({"header": {"revision": "12"}, "responses": [found]})


def test_a_campaign_is_won_at_the_puts_revision_or_lost() -> None:
    won = answer(
        {"header": {"revision": "12"}, "succeeded": True, "responses": [{"response_put": {}}]}
    )
    assert wire.campaigned(won, 42) == 12
    assert wire.campaigned(held(41), 42) is None
    # An earlier try of the same campaign was applied (its answer lost): won, at that put.
    assert wire.campaigned(held(42), 42) == 9


def test_a_record_compares_the_epoch_and_the_lease() -> None:
    history = History(9, "a", frozenset({"b"}))
    request = wire.record_request(KEYS, history, 42)
    assert [
        (c["target"], c.get("create_revision"), c.get("lease")) for c in request["compare"]
    ] == [
        ("CREATE", "9", None),
        ("LEASE", None, "42"),
    ]
    put = request["success"][0]["request_put"]
    assert "lease" not in put and put["key"] == b64(KEYS.history)
    assert wire.decode_history(base64.b64decode(put["value"])) == history
    assert wire.recorded(answer({"header": {}, "succeeded": True})) is True
    assert wire.recorded(answer({"header": {}})) is False


def test_a_keepalive_answer_without_a_ttl_is_a_lease_gone() -> None:
    assert wire.kept_alive(b'{"result":{"header":{},"ID":"1","TTL":"5"}}\n') is True
    assert wire.kept_alive(b'{"result":{"header":{},"ID":"1"}}\n\n') is False
    gone = {"error": {"grpc_code": 5, "http_code": 404, "message": "requested lease not found"}}
    assert wire.kept_alive(answer(gone)) is False
    with pytest.raises(wire.EtcdError, match="timed out"):
        wire.kept_alive(answer({"error": "etcdserver: request timed out", "code": 14}))


def test_a_lease_gone_already_counts_as_revoked() -> None:
    wire.revoked(answer({"header": {}}))
    wire.revoked(
        answer({"error": "etcdserver: requested lease not found", "message": "", "code": 5})
    )
    with pytest.raises(wire.EtcdError):
        wire.revoked(answer({"error": "etcdserver: no leader", "code": 14}))


def test_range_answers() -> None:
    assert wire.leader_of(answer({"header": {"revision": "3"}})) is None
    assert wire.leader_of(answer({"kvs": [leader_kv(1)]})) == Leader(
        "a", "127.0.0.1:1", "127.0.0.1:2", 9
    )
    history = History(9, "a", frozenset({"b"}))
    kv = {"create_revision": "3", "value": b64(wire.encode_history(history))}
    assert wire.history_of(answer({"kvs": [kv]})) == history
    assert wire.history_of(answer({"count": "0"})) is None


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<html>404</html>",
        b"[1]",
        b'{"result": 1}',
        b'{"kvs": 1}',
        b'{"kvs": [{"value": "!"}]}',
    ],
)
def test_what_is_not_an_etcd_answer_is_an_error(body: bytes) -> None:
    with pytest.raises(wire.EtcdError):
        wire.leader_of(body)
