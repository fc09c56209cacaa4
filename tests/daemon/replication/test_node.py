"""
The daemon's roles, in-process: a real queue and real server factories on a
L{task.Clock}, connections over a L{StringTransport}, and test doubles of
the role manager (which calls the L{Node} as its C{IRoleListener}) and of
the replication stream's sides.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from zope.interface import implementer
from zope.interface.verify import verifyObject

from quicx.daemon.config.sections import ReplicationSettings
from quicx.daemon.handlers import tables
from quicx.daemon.journal.records import RecoveredTask, Recovery
from quicx.daemon.observe.eventbus import EventBus
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.dispatcher import EPOCH_SHIFT
from quicx.daemon.queue.shared import SharedData
from quicx.daemon.replication.interfaces import IRoleListener, Leader, RoleState
from quicx.daemon.replication.node import (
    EXIT_DEMOTED,
    IReplicationSide,
    Node,
    ReplicationFigures,
    Sides,
)
from quicx.daemon.server import QuicxServerFactory
from quicx.protocol import checkpoints, codec, link, outcomes, taskflow, wire
from quicx.protocol.codec import ErrorCode, MessageType
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.role import RoleAction, encode_role
from tests.fakes import make_queue

SETTINGS = ReplicationSettings(etcd="http://127.0.0.1:2379", listen="tcp:0", name="a")
HERE = "10.0.0.1:16381"
OTHER = Leader("b", "10.0.0.2:16381", "10.0.0.2:16400", 5)


@implementer(IReplicationSide)
@define
class FakeSide:
    """A side of the stream: its figures, and a stop the test finishes."""

    kind: str
    arg: object
    figures_now: ReplicationFigures = field(factory=ReplicationFigures)
    stopping: Deferred[None] | None = None

    def figures(self) -> ReplicationFigures:
        return self.figures_now

    def stop(self) -> Deferred[None]:
        self.stopping = Deferred()
        return self.stopping


@define
class FakeSides:
    started: list[FakeSide] = field(factory=list)

    def primary(self, epoch: int) -> FakeSide:
        self.started.append(FakeSide("primary", epoch))
        return self.started[-1]

    def standby(self, leader: Leader) -> FakeSide:
        self.started.append(FakeSide("standby", leader))
        return self.started[-1]


@define
class FakeManager:
    """The role manager, as ROLE asks it."""

    state: RoleState = field(factory=RoleState)
    steps: list[Deferred[None]] = field(factory=list)
    campaigns: int = 0

    def step_down(self) -> Deferred[None]:
        self.steps.append(Deferred())
        return self.steps[-1]

    def campaign_now(self) -> None:
        self.campaigns += 1


@define
class Shard:
    """One daemon of a shard, in-process."""

    clock: Clock
    queue: QueueService
    clients: QuicxServerFactory
    admin: QuicxServerFactory
    node: Node
    sides: FakeSides
    left: list[int]
    recovered: list[bool]


def served_queue(clock: Clock) -> QueueService:
    """A queue with the parts HELLO describes: shared data and an event bus."""
    queue = make_queue(clock)
    queue.plug(shared=SharedData(queue), events=EventBus(queue, clock))
    return queue


def shard(clock: Clock, recovery: Recovery | None = None) -> Shard:
    queue = served_queue(clock)
    clients = QuicxServerFactory(queue, clock)
    admin = QuicxServerFactory(queue, clock, admin=True)
    left: list[int] = []
    recovered: list[bool] = []
    sides = FakeSides()

    def recover() -> None:
        if recovery is not None:
            queue.restore(recovery)
        recovered.append(True)

    node = Node(
        SETTINGS,
        HERE,
        recover,
        queue.dispatcher,
        [clients, admin],
        left.append,
        Sides(sides.primary, sides.standby),
    )
    return Shard(clock, queue, clients, admin, node, sides, left, recovered)


class Conn:
    """A connection to a factory over a StringTransport; its answers, decoded."""

    def __init__(self, factory: QuicxServerFactory, version: int = 2) -> None:
        self.version = version
        self.transport = StringTransport()
        protocol = factory.buildProtocol(None)
        assert protocol is not None
        self.protocol = protocol
        protocol.makeConnection(self.transport)
        self.parser = FrameParser(1 << 20, check_types=False, v2_max_length=1 << 20)

    def send(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def frames(self, clock: Clock | None = None) -> list[tuple[int, bytes]]:
        if clock is not None:
            clock.advance(0)
        found = self.parser.feed(self.transport.value())
        self.transport.clear()
        return [(f.message_type, f.payload) for f in found if isinstance(f, Frame)]

    def ask(self, data: bytes, clock: Clock | None = None) -> tuple[int, bytes]:
        self.send(data)
        (answer,) = self.frames(clock)
        return answer

    def error(self, data: bytes) -> tuple[int, str]:
        kind, body = self.ask(data)
        assert kind == MessageType.ERROR, (kind, body)
        return body[0], body[1:].decode()

    def info(self, data: bytes, clock: Clock | None = None) -> Any:
        kind, body = self.ask(data, clock)
        assert kind == MessageType.INFO, (kind, body)
        return json.loads(body)

    @property
    def closed(self) -> bool:
        return bool(self.transport.disconnecting or self.transport.disconnected)


def submit(payload: bytes = b"x") -> bytes:
    return taskflow.encode_submit(b"t", payload)


def hello() -> bytes:
    return link.encode_hello("test", "1")


def worker_task(conn: Conn, clock: Clock) -> tuple[int, int]:
    """READY on C{conn}, then its TASK: the task id and token."""
    conn.send(taskflow.encode_ready(1))
    (task,) = [(k, b) for k, b in conn.frames(clock) if k == MessageType.TASK]
    delivery = taskflow.decode_task(task[1])
    return delivery.task_id, delivery.token


# -- not the primary: refused, but HELLO -------------------------------------------------


def test_a_daemon_without_replication_keeps_its_tables() -> None:
    factory = QuicxServerFactory(make_queue(), Clock())
    assert factory.handlers_v1 is tables.V1 and factory.handlers_v2 is tables.V2
    assert factory.replication is None


def test_the_node_is_a_role_listener() -> None:
    assert verifyObject(IRoleListener, shard(Clock()).node)


def test_a_candidate_refuses_every_request_but_hello() -> None:
    daemon = shard(Clock())
    v2 = Conn(daemon.clients)
    assert v2.error(submit()) == (ErrorCode.NOT_PRIMARY, "")
    assert v2.error(taskflow.encode_ready(1)) == (ErrorCode.NOT_PRIMARY, "")
    assert v2.error(frame_of(MessageType.STATS)) == (ErrorCode.NOT_PRIMARY, "")
    assert v2.error(frame_of(MessageType.STATUS))[0] == ErrorCode.NOT_FOUND  # answered
    info = v2.info(hello())
    assert (info["role"], info["epoch"], info["primary"]) == ("candidate", 0, "")
    assert info["server"] == "quicx"
    v1 = Conn(daemon.clients, version=1)
    assert v1.error(wire.encode_submit(b"t", b"x")) == (
        wire.ErrorCode.QUEUE_FULL,
        "not the primary: no primary is known yet",
    )
    assert daemon.queue.stats().queue_depth == 0 and daemon.recovered == []


def frame_of(kind: MessageType, payload: bytes = b"") -> bytes:
    return codec.frame(kind, payload)


def test_a_standby_names_the_primary_and_follows_it() -> None:
    daemon = shard(Clock())
    daemon.node.became_standby(OTHER)
    conn = Conn(daemon.clients)
    assert conn.error(submit()) == (ErrorCode.NOT_PRIMARY, OTHER.client)
    info = conn.info(hello())
    assert (info["role"], info["epoch"], info["primary"]) == ("standby", 5, OTHER.client)
    v1 = Conn(daemon.clients, version=1)
    assert v1.error(wire.encode_submit(b"t", b"x"))[1] == (
        f"not the primary: the primary is at {OTHER.client}"
    )
    assert [(s.kind, s.arg) for s in daemon.sides.started] == [("standby", OTHER)]
    daemon.node.became_standby(OTHER)  # told again: nothing changes
    assert len(daemon.sides.started) == 1


def test_the_control_socket_of_a_standby_answers_status_and_role_too() -> None:
    daemon = shard(Clock())
    daemon.admin.status = lambda: {"format": "quicx-status/1", "uptime": 1.0}
    admin = Conn(daemon.admin)
    assert admin.error(frame_of(MessageType.PURGE, b"\x01q"))[0] == ErrorCode.NOT_PRIMARY
    assert admin.ask(frame_of(MessageType.STATUS))[0] == MessageType.INFO


# -- becoming the primary -------------------------------------------------------------------


def test_a_standby_promoted_recovers_its_journal_only_once_its_side_stopped() -> None:
    clock = Clock()
    daemon = shard(clock, recovery(41))
    daemon.node.became_standby(OTHER)
    follower = daemon.sides.started[0]
    waiting = Conn(daemon.clients)
    daemon.node.became_primary(9)
    assert follower.stopping is not None and daemon.recovered == []
    assert waiting.error(submit()) == (ErrorCode.NOT_PRIMARY, OTHER.client)
    follower.stopping.callback(None)
    assert daemon.recovered == [True] and daemon.queue.stats().queue_depth == 1
    assert [(s.kind, s.arg) for s in daemon.sides.started][1:] == [("primary", 9)]
    assert waiting.closed  # connections of the standby: closed, to reconnect to the primary
    conn = Conn(daemon.clients)
    info = conn.info(hello())
    assert (info["role"], info["epoch"], info["primary"]) == ("primary", 9, HERE)
    task_id, token = worker_task(conn_worker := Conn(daemon.clients), clock)
    assert (task_id, token >> EPOCH_SHIFT, token & ((1 << EPOCH_SHIFT) - 1)) == (41, 9, 1)
    conn_worker.send(outcomes.encode_ack(task_id, token))
    assert conn_worker.frames(clock) == []  # applied: an ACK is not answered
    assert daemon.queue.stats().queue_depth == 0 and daemon.queue.tasks_running == 0


def test_a_fence_while_the_standby_side_stops_cancels_the_promotion() -> None:
    daemon = shard(Clock(), recovery(41))
    daemon.node.became_standby(OTHER)
    follower = daemon.sides.started[0]
    daemon.node.became_primary(9)
    daemon.node.became_primary(9)  # told again: one promotion
    daemon.node.fenced("the lease ran out")
    assert follower.stopping is not None
    follower.stopping.callback(None)
    assert daemon.recovered == [] and daemon.node.state.role == "candidate"
    assert Conn(daemon.clients).error(submit())[0] == ErrorCode.NOT_PRIMARY
    daemon.node.became_primary(10)
    assert daemon.recovered == [True] and daemon.node.state == RoleState("primary", 10, "")
    assert [s.arg for s in daemon.sides.started] == [OTHER, 10]


def test_a_standby_side_that_cannot_stop_makes_the_promoted_daemon_leave() -> None:
    daemon = shard(Clock())
    daemon.node.became_standby(OTHER)
    follower = daemon.sides.started[0]
    daemon.node.became_primary(9)
    assert follower.stopping is not None
    follower.stopping.errback(OSError("disk full"))
    assert daemon.recovered == [] and daemon.left == [1]
    assert Conn(daemon.clients).error(submit())[0] == ErrorCode.NOT_PRIMARY


def test_a_new_primary_to_follow_waits_for_the_old_side_to_stop() -> None:
    daemon = shard(Clock())
    daemon.node.became_standby(OTHER)
    first = daemon.sides.started[0]
    newer = Leader("c", "10.0.0.3:16381", "10.0.0.3:16400", 6)
    daemon.node.became_standby(newer)
    assert len(daemon.sides.started) == 1 and first.stopping is not None
    first.stopping.callback(None)
    assert [s.arg for s in daemon.sides.started] == [OTHER, newer]
    assert daemon.node.describe() == {"role": "standby", "epoch": 6, "primary": newer.client}


def recovery(*task_ids: int) -> Recovery:
    """What a standby's journal holds: these tasks, queued."""
    tasks = tuple(RecoveredTask(task_id, b"t", b"x") for task_id in task_ids)
    return Recovery(tasks, max(task_ids, default=0), 0, 0, len(tasks))


def test_a_journal_that_cannot_be_recovered_makes_the_daemon_leave() -> None:
    daemon = shard(Clock())

    def broken() -> None:
        raise SystemExit("quicx: journal j: bad record; the daemon will not start on it")

    daemon.node._recover = broken
    daemon.node.became_primary(3)
    assert daemon.left == [1] and daemon.node.state.role == "candidate"
    assert Conn(daemon.clients).error(submit())[0] == ErrorCode.NOT_PRIMARY


# -- fenced: at once, no more acknowledgements ------------------------------------------------


def test_a_fenced_primary_drops_its_clients_refuses_and_leaves() -> None:
    clock = Clock()
    daemon = shard(clock)
    daemon.node.became_primary(7)
    producer, worker = Conn(daemon.clients), Conn(daemon.clients)
    assert producer.ask(submit(), clock)[0] == MessageType.OK
    task_id, token = worker_task(worker, clock)
    admin = Conn(daemon.admin)
    daemon.node.fenced("the lease ran out")
    assert producer.closed and worker.closed and not admin.closed
    assert daemon.left == [EXIT_DEMOTED]
    assert daemon.node.status().role == "fenced"
    late = Conn(daemon.clients)
    assert late.error(outcomes.encode_ack(task_id, token)) == (ErrorCode.NOT_PRIMARY, "")
    assert admin.ask(outcomes.encode_ack(task_id, token))[0] == MessageType.ERROR


def test_a_primary_told_another_is_primary_leaves() -> None:
    daemon = shard(Clock())
    daemon.node.became_primary(7)
    conn = Conn(daemon.clients)
    daemon.node.became_standby(Leader("b", "10.0.0.2:16381", "10.0.0.2:16400", 8))
    assert conn.closed and daemon.left == [EXIT_DEMOTED]
    assert Conn(daemon.clients).error(submit())[0] == ErrorCode.NOT_PRIMARY


def test_a_candidate_fenced_has_nothing_to_leave() -> None:
    daemon = shard(Clock())
    daemon.node.fenced("no lease store")
    assert daemon.left == [] and daemon.node.state.role == "candidate"


# -- the epoch in the tokens: a zombie's late outcome is never applied ---------------------------


def test_a_zombie_workers_late_reports_after_a_failover_are_stale() -> None:
    """
    Primary A (epoch 7) hands task 41 to a worker, then is fenced; B, its
    standby, becomes primary at epoch 9 with task 41 in its journal.  The
    worker, still running it, reconnects to B: its ACK, NACK, TOUCH,
    PROGRESS and CHECKPOINT quote A's token: each is refused as stale
    (counted), none applied; B's own delivery of the task is what counts.
    """
    clock = Clock()
    a = shard(clock)
    a.node.became_primary(7)
    producer = Conn(a.clients)
    assert producer.ask(submit(), clock)[0] == MessageType.OK
    zombie = Conn(a.clients)
    task_id, old_token = worker_task(zombie, clock)
    assert old_token >> EPOCH_SHIFT == 7
    a.node.fenced("the lease ran out")
    assert zombie.closed

    b = shard(clock, recovery(task_id))
    b.node.became_primary(9)
    assert b.queue.stats().queue_depth == 1
    back = Conn(b.clients)
    reports = [
        outcomes.encode_ack(task_id, old_token),
        outcomes.encode_nack(task_id, old_token, "late"),
        outcomes.encode_touch(task_id, old_token, 30),
        outcomes.encode_progress(task_id, old_token, 5000, "half"),
    ]
    for report in reports:
        code, message = back.error(report)
        assert code == ErrorCode.STALE, message
        assert "epoch 7" in message and "epoch 9" in message
    kind, body = back.ask(
        checkpoints.encode_checkpoint(task_id, old_token, taskflow.Result.of(b"state"))
    )
    assert kind == MessageType.CHECKPOINT
    assert checkpoints.decode_checkpointed(body).code == ErrorCode.STALE
    assert b.queue.leases.stale == 5
    assert b.queue.stats().queue_depth == 1  # nothing applied: still queued

    fresh = Conn(b.clients)
    same_task, new_token = worker_task(fresh, clock)
    assert same_task == task_id and new_token >> EPOCH_SHIFT == 9
    assert back.error(outcomes.encode_ack(task_id, old_token))[0] == ErrorCode.STALE
    assert b.queue.tasks_running == 1
    fresh.send(outcomes.encode_ack(task_id, new_token))
    assert fresh.frames(clock) == []
    assert b.queue.tasks_running == 0 and b.queue.leases.stale == 6


def test_tokens_carry_the_epoch_modulo_two_to_the_24() -> None:
    clock = Clock()
    daemon = shard(clock)
    daemon.node.became_primary((1 << 24) + 3)
    assert Conn(daemon.clients).ask(submit(), clock)[0] == MessageType.OK
    _, token = worker_task(Conn(daemon.clients), clock)
    assert token >> EPOCH_SHIFT == 3 and token < 1 << 64


def test_without_replication_tokens_are_from_the_clock() -> None:
    clock = Clock()
    clock.advance(1000)
    queue = make_queue(clock)
    factory = QuicxServerFactory(queue, clock)
    assert Conn(factory).ask(submit(), clock)[0] == MessageType.OK
    _, token = worker_task(Conn(factory), clock)
    assert token == 1_000_000 << 20


# -- ROLE -----------------------------------------------------------------------------------------


def test_role_promote_asks_the_manager_to_campaign() -> None:
    daemon = shard(Clock())
    manager = daemon.node.manager = FakeManager()
    daemon.node.became_standby(OTHER)
    answer = Conn(daemon.admin).info(encode_role(RoleAction.PROMOTE))
    assert manager.campaigns == 1
    assert answer == {"role": "standby", "epoch": 5, "primary": OTHER.client}


def stepping_down(clock: Clock) -> tuple[Shard, FakeManager, Conn]:
    """A primary of epoch 4 whose admin has sent ROLE step-down (not answered yet)."""
    daemon = shard(clock)
    manager = daemon.node.manager = FakeManager()
    daemon.node.became_primary(4)
    admin = Conn(daemon.admin)
    admin.send(encode_role(RoleAction.STEP_DOWN))
    return daemon, manager, admin


def assert_stepped_down(daemon: Shard, admin: Conn, clock: Clock) -> None:
    """The admin was answered INFO fenced at epoch 4, and the daemon left, demoted."""
    ((kind, body),) = admin.frames(clock)
    assert (kind, json.loads(body)) == (
        MessageType.INFO,
        {"role": "fenced", "epoch": 4, "primary": ""},
    )
    assert daemon.left == [EXIT_DEMOTED]


def test_role_step_down_answers_once_the_manager_has_stepped_down() -> None:
    clock = Clock()
    daemon, manager, admin = stepping_down(clock)
    assert admin.frames(clock) == [] and len(manager.steps) == 1
    daemon.node.became_standby(Leader("b", "10.0.0.2:16381", "10.0.0.2:16400", 6))
    manager.steps[0].callback(None)
    assert_stepped_down(daemon, admin, clock)


def test_role_step_down_is_answered_before_the_fenced_daemon_leaves() -> None:
    # The role manager tells the node it is fenced first, then resigns: the
    # daemon leaves once the answer is made, not at the fence (it closed the
    # admin's connection unanswered before).
    clock = Clock()
    daemon, manager, admin = stepping_down(clock)
    daemon.node.fenced("stepped down")
    assert daemon.left == [] and daemon.node.state.role == "fenced"
    manager.steps[0].callback(None)
    assert_stepped_down(daemon, admin, clock)


def test_role_step_down_of_a_standby_is_a_conflict() -> None:
    daemon = shard(Clock())
    daemon.node.manager = FakeManager()
    daemon.node.became_standby(OTHER)
    code, message = Conn(daemon.admin).error(encode_role(RoleAction.STEP_DOWN))
    assert code == ErrorCode.CONFLICT and OTHER.client in message


def test_role_failures_are_answered() -> None:
    clock = Clock()
    _, manager, admin = stepping_down(clock)
    manager.steps[0].errback(RuntimeError("the lease store did not answer"))
    ((kind, body),) = admin.frames(clock)
    assert kind == MessageType.ERROR
    assert body[1:].decode() == "step down failed: the lease store did not answer"


def test_role_needs_the_admin_role_and_a_manager() -> None:
    daemon = shard(Clock())
    assert Conn(daemon.clients).error(encode_role(RoleAction.PROMOTE))[0] == (ErrorCode.NOT_PRIMARY)
    daemon.node.became_primary(2)
    assert Conn(daemon.clients).error(encode_role(RoleAction.PROMOTE))[0] == (ErrorCode.FORBIDDEN)
    assert Conn(daemon.admin).error(encode_role(RoleAction.PROMOTE)) == (
        ErrorCode.NOT_FOUND,
        "this daemon has no role manager",
    )


def test_role_on_a_daemon_without_replication_is_not_found() -> None:
    admin = Conn(QuicxServerFactory(make_queue(), Clock(), admin=True))
    assert admin.error(encode_role(RoleAction.STEP_DOWN)) == (
        ErrorCode.NOT_FOUND,
        "this daemon is not one of a shard ([replication] etcd is not set)",
    )


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\x03"])
def test_a_bad_role_is_invalid(payload: bytes) -> None:
    daemon = shard(Clock())
    daemon.node.manager = FakeManager()
    code, _ = Conn(daemon.admin).error(frame_of(MessageType.ROLE, payload))
    assert code == ErrorCode.INVALID_MESSAGE


# -- status ------------------------------------------------------------------------------------


def test_the_status_part_takes_the_sides_figures() -> None:
    daemon = shard(Clock())
    daemon.node.became_primary(12)
    side = daemon.sides.started[0]
    side.figures_now = ReplicationFigures(3, 0.25, ("c", "b"))
    status = daemon.node.status()
    assert (status.role, status.epoch, status.primary, status.name, status.shard) == (
        "primary",
        12,
        HERE,
        "a",
        "default",
    )
    assert (status.mode, status.standby_lost) == ("sync", "wait")
    assert (status.lag_batches, status.lag_seconds, status.in_sync_standbys) == (
        3,
        0.25,
        ("b", "c"),
    )


def test_an_oversized_role_is_refused_from_its_header() -> None:
    daemon = shard(Clock())
    conn = Conn(daemon.admin)
    conn.send(struct.pack(">BBI", 2, MessageType.ROLE, 2))
    ((kind, body),) = conn.frames()
    assert kind == MessageType.ERROR and body[0] == ErrorCode.PAYLOAD_TOO_LARGE
