"""
Endpoint strings read: fields split at unescaped colons, a field found by its key, values unescaped.

Twisted's own parser builds the endpoint; these read what a description
says (C{tcp:16381:interface=127.0.0.1}, C{unix:path=...}) without one.
"""

from __future__ import annotations

PORT_KINDS = frozenset({"tcp", "tcp6", "ssl", "tls"})
"""The endpoint kinds with a port."""

WILDCARDS = frozenset({"", "0.0.0.0", "::"})
"""Interfaces that name no one host (a listener on all of them)."""


def split_endpoint(description: str, separator: str = ":") -> list[str]:
    """
    An endpoint string's fields (or a field's C{key=value} halves, with
    C{separator} C{=}), split at each unescaped C{separator}, escapes kept.
    """
    fields, current, escaped = [], "", False
    for character in description:
        if character == separator and not escaped:
            fields.append(current)
            current = ""
            continue
        current += character
        escaped = character == "\\" and not escaped
    return [*fields, current]


def unescape(field: str) -> str:
    """An endpoint field's value, its backslash escapes undone."""
    out, escaped = "", False
    for character in field:
        if character == "\\" and not escaped:
            escaped = True
            continue
        out += character
        escaped = False
    return out


def key_field(fields: list[str], key: str) -> int | None:
    """Which field holds C{key}'s value: C{key=...}, else the first plain one."""
    named = [i for i, f in enumerate(fields) if i and split_endpoint(f, "=")[0] == key]
    plain = [i for i, f in enumerate(fields) if i and len(split_endpoint(f, "=")) == 1]
    found = named or plain
    return found[0] if found else None


def field_value(field: str) -> str:
    """A field's value: what follows its key, if it has one."""
    return unescape(split_endpoint(field, "=")[-1])


def tcp_address(description: str) -> str:
    """
    C{HOST:PORT} of a TCP endpoint string on a port of its own: its
    interface, or 127.0.0.1 where it listens on all; C{""} for another kind
    of endpoint, or port 0.
    """
    fields = split_endpoint(description)
    where = key_field(fields, "port") if fields[0] in ("tcp", "tcp6") else None
    port = "" if where is None else field_value(fields[where])
    if not port.isdigit() or not int(port):
        return ""
    named = dict(split_endpoint(f, "=") for f in fields[1:] if len(split_endpoint(f, "=")) == 2)
    host = unescape(named.get("interface", ""))
    if host in WILDCARDS:
        return f"127.0.0.1:{port}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
