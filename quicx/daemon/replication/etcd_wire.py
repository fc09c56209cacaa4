"""
The lease store's requests to etcd's v3 HTTP/JSON gateway, and its answers
read, without I/O.

etcd 3.4 serves its gRPC API as JSON under C{/v3/...}: keys and values are
base64, 64-bit numbers are strings.  Each C{*_request} function builds the
JSON body of one call; each reader takes the answer's bytes and raises
L{EtcdError} for an error answer or one it cannot read.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any
from urllib.parse import urlsplit

from attrs import frozen

from quicx.daemon.replication.interfaces import History, Leader

Json = dict[str, Any]

NOT_FOUND = 5
"""The gRPC code of an answer about a lease that is gone (revoked or expired)."""

GRANT = "/v3/lease/grant"
KEEPALIVE = "/v3/lease/keepalive"
REVOKE = "/v3/lease/revoke"
RANGE = "/v3/kv/range"
TXN = "/v3/kv/txn"


class EtcdError(Exception):
    """etcd answered with an error, or with something that is not its answer."""


@frozen
class ShardKeys:
    """The keys of one shard: its leader (under a lease) and its history (no lease)."""

    leader: bytes
    history: bytes


def shard_keys(prefix: str, shard: str) -> ShardKeys:
    base = f"{prefix.rstrip('/')}/{shard}"
    return ShardKeys(f"{base}/leader".encode(), f"{base}/history".encode())


def endpoints(text: str) -> list[str]:
    """
    The comma-separated C{http://host:port} URLs of C{[replication] etcd}.

    @raise ValueError: one is not an C{http} URL with a host and a port.
    """
    found = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        url = urlsplit(item)
        try:
            port = url.port
        except ValueError:
            port = None
        if url.scheme != "http" or not url.hostname or port is None or url.path.strip("/"):
            raise ValueError(f"{item!r} is not an http://host:port URL")
        found.append(item.rstrip("/"))
    if not found:
        raise ValueError("no etcd URL given")
    return found


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_leader(leader: Leader) -> bytes:
    """The leader key's value (its epoch is the key's create_revision, not in the value)."""
    fields = {"name": leader.name, "client": leader.client, "replication": leader.replication}
    return json.dumps(fields, sort_keys=True).encode()


def encode_history(history: History) -> bytes:
    fields = {
        "epoch": history.epoch,
        "primary": history.primary,
        "in_sync": sorted(history.in_sync),
    }
    return json.dumps(fields, sort_keys=True).encode()


def _text(fields: Json, name: str) -> str:
    value = fields[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} is not a string")
    return value


def decode_leader(value: bytes, epoch: int) -> Leader:
    try:
        fields = json.loads(value)
        return Leader(
            _text(fields, "name"), _text(fields, "client"), _text(fields, "replication"), epoch
        )
    except (ValueError, KeyError, TypeError) as e:
        raise EtcdError(f"the leader key holds no leader ({e}): {value[:200]!r}") from None


def decode_history(value: bytes) -> History:
    try:
        fields = json.loads(value)
        epoch, names = fields["epoch"], fields["in_sync"]
        if not isinstance(epoch, int) or not all(isinstance(name, str) for name in names):
            raise TypeError("epoch is not a number, or in_sync not names")
        return History(epoch, _text(fields, "primary"), frozenset(names))
    except (ValueError, KeyError, TypeError) as e:
        raise EtcdError(f"the history key holds no history ({e}): {value[:200]!r}") from None


# -- requests ----------------------------------------------------------------------------------


def grant_request(ttl: float) -> Json:
    """A new lease of C{ttl} seconds (etcd counts whole seconds: rounded up)."""
    return {"TTL": str(max(1, math.ceil(ttl)))}


def keepalive_request(lease: int) -> Json:
    return {"ID": str(lease)}


def revoke_request(lease: int) -> Json:
    return {"ID": str(lease)}


def range_request(key: bytes) -> Json:
    return {"key": _b64(key)}


def campaign_request(keys: ShardKeys, candidate: Leader, lease: int) -> Json:
    """
    One transaction: if the leader key does not exist, put C{candidate} there
    under C{lease}; else read it (to tell an earlier try of this campaign).
    """
    key = _b64(keys.leader)
    return {
        "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
        "success": [
            {
                "request_put": {
                    "key": key,
                    "value": _b64(encode_leader(candidate)),
                    "lease": str(lease),
                }
            }
        ],
        "failure": [{"request_range": {"key": key}}],
    }


def record_request(keys: ShardKeys, history: History, lease: int) -> Json:
    """One transaction: put C{history} if the leader key was taken at its epoch under C{lease}."""
    leader = _b64(keys.leader)
    return {
        "compare": [
            {
                "key": leader,
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": str(history.epoch),
            },
            {"key": leader, "target": "LEASE", "result": "EQUAL", "lease": str(lease)},
        ],
        "success": [
            {"request_put": {"key": _b64(keys.history), "value": _b64(encode_history(history))}}
        ],
    }


# -- answers -----------------------------------------------------------------------------------


def parse(body: bytes) -> Json:
    """
    The JSON object of an answer (a streamed one's first object, under its
    C{result}).

    @raise EtcdError: an error answer (its C{code} in C{args[1]}), or not JSON.
    """
    first = next((line for line in body.splitlines() if line.strip()), b"")
    try:
        answer = json.loads(first)
    except ValueError:
        raise EtcdError(f"not an etcd answer: {body[:200]!r}") from None
    if not isinstance(answer, dict):
        raise EtcdError(f"not an etcd answer: {body[:200]!r}")
    if "error" in answer:
        error = answer["error"]
        message = error.get("message", "") if isinstance(error, dict) else error
        code = error.get("grpc_code") if isinstance(error, dict) else answer.get("code")
        raise EtcdError(f"etcd: {message}", code)
    result = answer.get("result", answer)
    if not isinstance(result, dict):
        raise EtcdError(f"not an etcd answer: {body[:200]!r}")
    return result


def _number(fields: Json, name: str, default: int | None = None) -> int:
    value = fields.get(name, default)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise EtcdError(f"{name} is not a number in {fields!r:.200}") from None


def granted(body: bytes) -> int:
    """The lease's id."""
    return _number(parse(body), "ID")


def kept_alive(body: bytes) -> bool:
    """Whether the lease is still alive (an answer without a TTL: it is gone)."""
    try:
        return _number(parse(body), "TTL", 0) > 0
    except EtcdError as e:
        if len(e.args) > 1 and e.args[1] == NOT_FOUND:
            return False
        raise


def revoked(body: bytes) -> None:
    """Nothing, or L{EtcdError}: a lease that is gone already counts as revoked."""
    try:
        parse(body)
    except EtcdError as e:
        if not (len(e.args) > 1 and e.args[1] == NOT_FOUND):
            raise


def _first_kv(fields: Json) -> Json | None:
    kvs = fields.get("kvs") or []
    if not isinstance(kvs, list) or not all(isinstance(kv, dict) for kv in kvs):
        raise EtcdError(f"kvs is not a list of keys in {fields!r:.200}")
    return kvs[0] if kvs else None


def _value(kv: Json) -> bytes:
    try:
        return base64.b64decode(kv.get("value", ""), validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise EtcdError(f"a value that is not base64 in {kv!r:.200}") from None


def leader_of(body: bytes) -> Leader | None:
    """The leader in a range answer of the leader key, its epoch the key's create_revision."""
    kv = _first_kv(parse(body))
    return None if kv is None else decode_leader(_value(kv), _number(kv, "create_revision"))


def history_of(body: bytes) -> History | None:
    kv = _first_kv(parse(body))
    return None if kv is None else decode_history(_value(kv))


def campaigned(body: bytes, lease: int) -> int | None:
    """
    The epoch won by a campaign under C{lease} (the revision of its put), or
    C{None} if another holds the key.  A key held under C{lease} itself (an
    earlier try of this same campaign that was applied) counts as won.
    """
    answer = parse(body)
    if answer.get("succeeded"):
        return _number(answer.get("header", {}), "revision")
    responses = answer.get("responses") or [{}]
    held = _first_kv(
        responses[0].get("response_range", {}) if isinstance(responses[0], dict) else {}
    )
    if held is not None and _number(held, "lease", 0) == lease:
        return _number(held, "create_revision")
    return None


def recorded(body: bytes) -> bool:
    return bool(parse(body).get("succeeded", False))
