"""
Endpoint strings that name daemons: one address, or a cluster's list of
them.  Here, below the clients and the daemon, because both read them: the
clients to connect, the daemon to poll its C{[cluster] peers}.
"""

from __future__ import annotations

from collections.abc import Iterable

ENDPOINT_KINDS = frozenset({"tcp", "unix", "tls", "ssl"})


def normalize_address(address: str) -> str:
    """An endpoint string as given, or C{tcp:HOST:PORT} for a bare C{HOST:PORT}."""
    return address if address.partition(":")[0] in ENDPOINT_KINDS else f"tcp:{address}"


def split_addresses(addresses: str | Iterable[str]) -> tuple[str, ...]:
    """
    One daemon's address or several: C{"tcp:h1:16381,tcp:h2:16381"} (commas
    separate; spaces around them are ignored) or an iterable of addresses ->
    each address normalized (L{normalize_address}), in the order given.

    The order matters: it is each daemon's place in a cluster, the same for
    every client given the same list.

    @raise ValueError: no address, an empty item, or one daemon named twice.
    """
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    found = tuple(normalize_address(item.strip()) for item in items)
    if not found:
        raise ValueError("no daemon address given")
    if any(item == "tcp:" for item in found):
        raise ValueError(f"{addresses!r}: an empty address in the list")
    repeated = sorted({item for item in found if found.count(item) > 1})
    if repeated:
        raise ValueError(f"{', '.join(repeated)} named twice in the address list")
    return found
