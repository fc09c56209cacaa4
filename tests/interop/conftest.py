"""
Fixtures of the interop suite (raw sockets; nothing imported from quicx).

The per-test C{daemon} and C{start_daemon} come from tests/conftest.py;
L{launch} gives a module a daemon of its own, shared by its tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.interop.raw import Wire
from tools.launcher import DaemonProcess

LISTEN = "[server]\nlisten = tcp:0:interface=127.0.0.1\n"


@contextmanager
def launch(directory: Path, config: str | None = None) -> Iterator[DaemonProcess]:
    """
    A daemon run in C{directory} for the life of the block: on the built-in
    defaults, or with a quicx.conf of C{config} after a loopback C{listen}.
    Its control socket is C{directory/control.sock} either way.
    """
    args = []
    if config is not None:
        path = directory / "quicx.conf"
        path.write_text(LISTEN + config)
        args.append(f"--config={path}")
    daemon = DaemonProcess(directory, args).start()
    try:
        yield daemon
    finally:
        daemon.kill()


@pytest.fixture
def wires() -> Iterator[Callable[..., Wire]]:
    """Open L{Wire}s (address, version); every one is closed after the test."""
    opened: list[Wire] = []

    def open_wire(address: tuple[str, int] | str, version: int = 2) -> Wire:
        opened.append(Wire(address, version))
        return opened[-1]

    yield open_wire
    for wire in opened:
        wire.close()
