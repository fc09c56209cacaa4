"""What the worker runner announces (ANNOUNCE), and what it refuses to."""

from __future__ import annotations

import os
import socket

import pytest

from quicx.clients.worker import Worker
from quicx.protocol import workers
from quicx.protocol.codec import HEADER


def announced(worker: Worker) -> workers.Announce:
    return workers.decode_announce(worker.announcement()[HEADER.size :])


def test_it_announces_its_handlers_types_its_name_host_and_pid() -> None:
    worker = Worker({"mail": print, "pdf": print}, name="web-1")
    assert announced(worker) == workers.Announce(
        frozenset({b"mail", b"pdf"}), "web-1", socket.gethostname(), os.getpid()
    )


def test_all_or_no_handlers_announce_every_type_and_a_list_is_its_own() -> None:
    assert announced(Worker({"mail": print}, types="all")).types is None
    assert announced(Worker()).types is None
    assert announced(Worker({"mail": print}, types=["x", "y"])).types == {b"x", b"y"}


@pytest.mark.parametrize(
    ("keywords", "said"),
    [
        ({"types": "some"}, 'types is "handlers", "all" or a list'),
        ({"types": []}, "1 to 65535 types"),
        ({"types": ["a", "a"]}, "announced twice"),
        ({"types": ["x" * 256]}, "1 to 255 bytes"),
        ({"name": "n" * 256}, "1 to 255 bytes"),
    ],
)
def test_what_it_cannot_announce_is_refused_at_once(keywords: dict[str, object], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        Worker(**keywords)  # type: ignore[arg-type]
