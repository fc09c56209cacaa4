"""
The spare descriptor (quicx.net.spare), in-process: a listener out of file
descriptors answers each waiting connection and closes it, at most so many
each time it is read, and keeps its spare.  (Against a real daemon with a
low open-file limit: tests/test_promises.py.)
"""

from __future__ import annotations

import socket
from errno import EAGAIN, EMFILE
from typing import Any

import pytest

from quicx.net.spare import AnsweringSocket, Spare


class OutOfFiles:
    """A listener with C{waiting} connections, that accepts only with the spare given up."""

    def __init__(self, spare: Spare, waiting: int) -> None:
        self.spare = spare
        self.waiting = waiting
        self.clients: list[socket.socket] = []

    def accept(self) -> tuple[socket.socket, Any]:
        if self.spare.fd is not None:
            raise OSError(EMFILE, "Too many open files")
        if not self.waiting:
            raise BlockingIOError(EAGAIN, "none waiting")
        self.waiting -= 1
        ours, theirs = socket.socketpair()
        self.clients.append(theirs)
        return ours, ("127.0.0.1", 40000 + len(self.clients))


def test_out_of_descriptors_each_waiting_connection_is_answered_and_closed() -> None:
    spare = Spare()
    listener = OutOfFiles(spare, 100)
    peers: list[Any] = []
    answering = AnsweringSocket(listener, b"ERROR", spare, peers.append, per_turn=64)  # type: ignore[arg-type]
    try:
        for total in (64, 100, 100):  # at most 64 each time the listener is read
            with pytest.raises(BlockingIOError):  # to Twisted: none waits
                answering.accept()
            assert len(peers) == 100 - listener.waiting == total
            assert spare.fd is not None  # taken back each time
        assert [address[1] for address in peers] == list(range(40001, 40101))
        for client in listener.clients:
            assert client.recv(100) == b"ERROR" and client.recv(100) == b""  # then closed
    finally:
        for client in listener.clients:
            client.close()
        spare.release()


def test_with_no_answer_a_waiting_connection_is_closed_with_nothing_sent() -> None:
    """A C{tls:} port's: the ERROR would need a handshake, so none is sent."""
    spare = Spare()
    listener = OutOfFiles(spare, 3)
    peers: list[Any] = []
    answering = AnsweringSocket(listener, b"", spare, peers.append)  # type: ignore[arg-type]
    try:
        with pytest.raises(BlockingIOError):
            answering.accept()
        assert len(peers) == 3 and spare.fd is not None
        for client in listener.clients:
            assert client.recv(100) == b""  # closed, nothing sent
    finally:
        for client in listener.clients:
            client.close()
        spare.release()
