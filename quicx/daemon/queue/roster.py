"""
The connections: their roles, the queues each worker serves, and what a closed one leaves.

L{Roster} opens and closes the kernel's sessions (a closed worker's tasks go
back to their queues) and keeps each worker's subscriptions; it is handed
the kernel (L{IKernel}) and never imports it.
"""

from __future__ import annotations

from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.speaker import Speaker
from quicx.protocol.session import IPeer, Role


class Roster:
    """
    The sessions of C{kernel}.

    @ivar workers: the connections that are workers.
    """

    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel
        self.workers = 0
        self._last_session_id = 0

    def open_session(self, peer: IPeer, speaker: Speaker) -> Session:
        """A new connection, spoken to by C{speaker} (until its first frame chooses another)."""
        self._last_session_id += 1
        session = Session(self._last_session_id, peer, self.kernel.clock(), speaker=speaker)
        self.kernel.sessions[session.session_id] = session
        return session

    def close_session(self, session: Session) -> None:
        """Forget a connection; tasks it held go back to the head of their queues, in order."""
        session.connected = False
        self.kernel.sessions.pop(session.session_id, None)
        if session.role is Role.WORKER:
            self.workers -= 1
            self._unsubscribe(session)
        for closed in self.kernel.hooks.session_closed:
            closed(session)
        session.replies.clear()
        if session.tasks or session.overdue:
            # Its late copies are forgotten: each task is queued, held by
            # another worker, or finished.
            session.overdue = {}
            self.take_back_held(session, "disconnected")
        self.kernel.check_drain()

    def take_back_held(self, session: Session, why: str, lost: bool = True) -> None:
        """
        Queue again, at the head of their queues in order, the tasks worker
        C{session} holds (it C{why}: disconnected, or was terminated: then
        not C{lost}, never a failed attempt, even with C{count_lost}).
        """
        held, session.tasks = session.tasks, {}
        cause = f"worker {session.peer.peer_name} {why}"
        for task in reversed(held.values()):
            task.holder = None
            self.kernel._requeue(
                task, f"its worker {why}", cause, worker=session.peer.peer_name, lost=lost
            )
        for queue in {task.home: None for task in held.values()}:
            self.kernel.dispatcher.serve_queue(queue)

    def claim_role(self, session: Session, role: Role) -> None:
        """
        Give a new connection its role, or check it has C{role} already.

        @raise ProtocolViolation: the connection has another role.
        """
        if session.claim(role) and role is Role.WORKER:
            self.workers += 1
            self._subscribe(session, (self.kernel.default_queue,))

    def subscribe(self, session: Session, names: tuple[str, ...]) -> None:
        """
        Make worker C{session} serve these queues, in order.

        @raise Refused: a queue would pass C{max_queues}.
        """
        new = [name for name in dict.fromkeys(names) if name not in self.kernel.queues]
        # All made before any is kept: a READY refused leaves no queue behind.
        self.kernel.queues.update(
            {name: self.kernel._new_queue(name, more) for more, name in enumerate(new)}
        )
        queues = tuple(self.kernel.queues[name] for name in names)
        old = session.subscriptions
        self._subscribe(session, queues)
        for queue in old:
            self.kernel._forget_if_idle(queue)

    def _subscribe(self, session: Session, queues: tuple[NamedQueue[Task, Session], ...]) -> None:
        self._unsubscribe(session)
        session.subscriptions = queues
        for queue in queues:
            queue.subscribers += 1

    def _unsubscribe(self, session: Session) -> None:
        for queue in session.subscriptions:
            queue.subscribers -= 1
            queue.idle.pop(session.session_id, None)
            if not session.connected:
                self.kernel._forget_if_idle(queue)
        session.subscriptions = ()
        session.waiting = False
