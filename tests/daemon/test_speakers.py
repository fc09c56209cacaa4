"""
Version 2's delivery (the speaker's C{delivery}) gives the bytes that
L{taskflow.encode_delivery} makes of every field of the task, whether it
takes the common context's one-call layout or not.
"""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from quicx.daemon.queue.extras import Extras
from quicx.daemon.speakers import V2
from quicx.protocol import taskflow
from tests.protocol.test_wire_trace import traces

extras = st.one_of(
    st.none(),
    st.builds(
        Extras,
        key=st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
        fairness=st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
        trace=st.one_of(st.none(), traces),
        deadline=st.sampled_from([0.0, 1800000000.5]),
        forward_progress=st.booleans(),
        failures=st.integers(0, 3),
        retries=st.one_of(st.none(), st.integers(0, 3)),
    ),
)


@given(
    extras,
    st.integers(0, 3),
    st.integers(0, 1 << 63),
    st.integers(1, 70000),
    st.sampled_from([b"", b"\x02q1"]),
    st.binary(max_size=20),
)
def test_a_delivery_is_what_encode_delivery_makes_of_its_fields(
    rare: Extras | None, retries: int, token: int, attempts: int, header: bytes, payload: bytes
) -> None:
    task = SimpleNamespace(
        task_id=7,
        task_type=b"job",
        priority=5,
        attempts=attempts,
        enqueued_at=1795000000.1234,
        token=token,
        extras=rare,
        home=SimpleNamespace(policy=SimpleNamespace(retries=retries)),
    )
    given_retries = retries if rare is None or rare.retries is None else rare.retries
    fields = rare or Extras()
    expected = taskflow.encode_delivery(
        7,
        b"job",
        payload,
        header,
        5,
        attempts,
        1795000000123,
        fields.key,
        fields.fairness,
        token,
        30_000,
        fields.failures,
        given_retries,
        fields.trace,
        None,
        fields.parents,
    )
    assert V2.delivery(task, payload, header, 30.0) == expected
