"""
A file descriptor held in reserve, so a listener still answers when the process has none.

A file descriptor held in reserve, so that a listener still answers a
connection once the process has no other descriptor to accept it with.

Past the open-file limit, C{accept} fails with C{EMFILE}; Twisted then
accepts each waiting connection with a reserve of its own and closes it at
once, unanswered: the client sees a reset.  L{AnsweringSocket} stands for a
port's listening socket: on C{EMFILE} it gives up the L{Spare} descriptor,
accepts one connection with it, sends it C{answer} (an error that says why),
closes it and takes the spare back; then the next, at most C{per_turn} each
time the reactor finds the listener readable, so that a flood holds the loop
no longer than that.  To Twisted it then says that none is waiting.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from contextlib import suppress
from errno import EAGAIN, EMFILE, ENFILE
from typing import Any

PER_TURN = 64
"""Connections answered out of descriptors each time the listener is read."""


class Spare:
    """One descriptor (of C{/dev/null}) kept open to be given up when none is left."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.take()

    def take(self) -> None:
        """Hold a descriptor again (if one is free: else at the next try)."""
        if self.fd is None:
            with suppress(OSError):
                self.fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    def release(self) -> bool:
        """Give the descriptor up for a moment; C{False}: none was held."""
        if self.fd is None:
            return False
        os.close(self.fd)
        self.fd = None
        return True


class AnsweringSocket:
    """
    A listening socket that, out of descriptors, answers C{answer} to each
    connection it cannot take and closes it; C{answered} hears each one's
    address.  Everything else is the socket's own.
    """

    def __init__(
        self,
        listener: socket.socket,
        answer: bytes,
        spare: Spare,
        answered: Callable[[Any], None],
        per_turn: int = PER_TURN,
    ) -> None:
        self.listener = listener
        self.answer = answer
        self.spare = spare
        self.answered = answered
        self.per_turn = per_turn

    def accept(self) -> tuple[socket.socket, Any]:
        try:
            return self.listener.accept()
        except OSError as e:
            if e.errno not in (EMFILE, ENFILE):
                raise
        self._answer_waiting()
        raise BlockingIOError(EAGAIN, "out of file descriptors")

    def _answer_waiting(self) -> None:
        for _ in range(self.per_turn):
            if not self.spare.release():
                return
            try:
                client, address = self.listener.accept()
            except OSError:  # none waits any more
                self.spare.take()
                return
            with client:
                client.setblocking(False)
                if self.answer:
                    with suppress(OSError):
                        client.send(self.answer)
            self.spare.take()
            self.answered(address)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.listener, name)
