"""
A worker connection's checkpoints on their way (L{quicx.clients.checkpoints.Saves}):
each answer goes to the oldest checkpoint of its task and token, whatever
came between; a refusal is the daemon's error; a lost connection fails them
all; what the daemon would refuse is refused before it is sent.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from quicx.clients.address import CLIENT_MAX_LENGTH
from quicx.clients.checkpoints import Saves
from quicx.protocol import checkpoints, codec, parents, taskflow
from quicx.protocol.errors import ConnectionLost, DaemonError, QueueFull, QuicxError
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.taskflow import Result


def answer(task_id: int, token: int, code: int = 0, reason: str = "") -> bytes:
    return checkpoints.encode_checkpointed(task_id, token, code, reason)[codec.HEADER_SIZE :]


def test_answers_go_to_their_task_and_token_in_order() -> None:
    saves = Saves(100)
    told: list[tuple[str, Exception | None]] = []

    def teller(name: str) -> Callable[[Exception | None], None]:
        return lambda error: told.append((name, error))

    for name, task_id, token in [("a1", 1, 10), ("b", 2, 20), ("a2", 1, 10)]:
        frame = saves.frame(task_id, token, name, teller(name))
        assert checkpoints.decode_checkpoint(frame[codec.HEADER_SIZE :]) == (
            checkpoints.Checkpoint(task_id, token, Result.of(name))
        )
    saves.answered(answer(2, 20, 0x01, "checkpoint memory is full"))
    saves.answered(answer(1, 10))
    saves.answered(answer(9, 9))  # nobody waits for it: passed over
    saves.answered(answer(1, 10, 0x08, "not its current one"))
    (b_name, b_error), (a1, a1_error), (a2, a2_error) = told
    assert (b_name, a1, a2, a1_error) == ("b", "a1", "a2", None)
    assert isinstance(b_error, QueueFull) and b_error.message == "checkpoint memory is full"
    assert isinstance(a2_error, DaemonError) and a2_error.code == 0x08


def test_a_lost_connection_fails_every_checkpoint_unanswered() -> None:
    saves = Saves(100)
    told: list[Exception | None] = []
    saves.frame(1, 1, b"x", told.append)
    saves.frame(2, 2, b"y", told.append)
    saves.lost("connection reset")
    assert [type(error) for error in told] == [ConnectionLost, ConnectionLost]
    assert "connection reset" in str(told[0])
    saves.answered(answer(1, 1))  # too late: nobody waits
    assert len(told) == 2


def test_what_the_daemon_would_refuse_is_refused_before_it_is_sent() -> None:
    with pytest.raises(QuicxError, match="no 'checkpoints' capability"):
        Saves(None).frame(1, 1, b"x", print)
    saves = Saves(4)
    saves.frame(1, 1, b"1234", print)
    with pytest.raises(
        ValueError, match=r"5 bytes exceeds the daemon's max_checkpoint \(4 bytes\)"
    ):
        saves.frame(1, 1, b"12345", print)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        saves.frame(1, 1, object(), print)


def test_the_largest_task_with_the_largest_checkpoint_fits_a_clients_frames() -> None:
    longest = b"k" * 255
    state = Result.of(b"s" * checkpoints.MAX_CHECKPOINT)
    context = taskflow.task_context(longest, longest, 5, 100, 3, 9, longest, state)
    task = taskflow.encode_task(
        1, b"t" * 255, b"p" * codec.MAX_PAYLOAD, b"\x40" + b"q" * 64, 9, 2, 0, context
    )
    assert len(task) - codec.HEADER_SIZE <= CLIENT_MAX_LENGTH
    parser = FrameParser(CLIENT_MAX_LENGTH, check_types=False, v2_max_length=CLIENT_MAX_LENGTH)
    (frame,) = parser.feed(task)
    assert isinstance(frame, Frame)
    assert taskflow.decode_task(frame.payload).checkpoint == state


def test_the_largest_task_with_the_most_parents_results_fits_a_clients_frames() -> None:
    """
    A child of the largest payload handed the most parents' results
    ([dependencies] max_results at its highest) and a checkpoint: its context
    may take all a u16 length allows, and a client still reads the TASK.
    """
    longest = b"k" * 255
    outcomes = tuple(
        parents.ParentOutcome(i, 1, 1, b"r" * 950) for i in range(1, parents.MAX_PARENTS + 1)
    )
    block = parents.encode_parents(parents.Parents(outcomes))
    state = Result.of(b"s" * 2000)
    context = taskflow.task_context(longest, longest, 5, 100, 3, 9, longest, state, block)
    assert len(context) > taskflow.MAX_TASK_CONTEXT - 2000
    task = taskflow.encode_task(
        1, b"t" * 255, b"p" * codec.MAX_PAYLOAD, b"\x40" + b"q" * 64, 9, 2, 0, context
    )
    parser = FrameParser(CLIENT_MAX_LENGTH, check_types=False, v2_max_length=CLIENT_MAX_LENGTH)
    (frame,) = parser.feed(task)
    assert isinstance(frame, Frame)
    decoded = taskflow.decode_task(frame.payload)
    assert decoded.checkpoint == state and decoded.parents is not None
