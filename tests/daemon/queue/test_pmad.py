"""PMAD: layout, O(1) allocate/free with reuse, spill, exhaustion, exact accounting."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quicx.daemon.queue import pmad
from quicx.daemon.queue.pmad import (
    BLOCK_HEADER_SIZE,
    AllocationTooLarge,
    InvalidBlock,
    LayoutError,
    Pmad,
    PoolExhausted,
    SizeClass,
    ZeroSizeAllocation,
)


def classes(*pairs: tuple[int, int]) -> list[SizeClass]:
    return [SizeClass(size, Decimal(percent)) for size, percent in pairs]


def test_default_layout_matches_the_reference() -> None:
    layout = pmad.default_classes()
    assert [c.size for c in layout] == list(range(16, 1025, 16))
    assert sum(c.percent for c in layout) == 100
    percent = {c.size: c.percent for c in layout}
    assert (percent[16], percent[32], percent[64]) == (2, 2, 12)
    assert all(p >= 1 for p in percent.values())
    # The leftover points went to the widest classes.
    assert [percent[s] for s in (1024, 1008)] == [2, 2]
    assert percent[48] == 1
    pool = Pmad(pmad.DEFAULT_POOL_SIZE, layout)
    assert all(n > 0 for n in pool.blocks_total)
    pool.close()


def test_carving_follows_the_percentages() -> None:
    pool = Pmad(100_000, classes((16, 50), (100, 50)))
    usable = 100_000 - pool.metadata_bytes
    assert pool.blocks_total == [usable // 2 // (16 + 16), usable // 2 // (100 + 16)]
    assert pool.bytes_used == pool.metadata_bytes
    assert pool.bytes_total == 100_000


def test_storing_nothing_still_takes_the_smallest_block() -> None:
    pool = Pmad(1 << 16, classes((16, 50), (128, 50)))
    handle = pool.store(b"")
    assert pool.read(handle) == b""
    assert [u.blocks_used for u in pool.usage()] == [1, 0]
    with pytest.raises(AllocationTooLarge):
        pool.store(b"x" * 129)
    pool.free(handle)
    assert pool.bytes_used == pool.metadata_bytes


def test_store_read_free_and_exact_accounting() -> None:
    pool = Pmad(64 * 1024, classes((16, 20), (64, 30), (256, 50)))
    base = pool.metadata_bytes
    a = pool.store(b"hello")
    b = pool.store(b"x" * 64)
    c = pool.store(b"y" * 65)
    assert (pool.read(a), pool.read(b), pool.read(c)) == (b"hello", b"x" * 64, b"y" * 65)
    strides = [BLOCK_HEADER_SIZE + s for s in (16, 64, 256)]
    assert pool.bytes_used == base + sum(strides)
    assert [u.blocks_used for u in pool.usage()] == [1, 1, 1]
    pool.free(b)
    assert pool.bytes_used == base + strides[0] + strides[2]
    pool.free(a)
    pool.free(c)
    assert pool.bytes_used == base
    assert [u.blocks_used for u in pool.usage()] == [0, 0, 0]


def test_freed_blocks_are_reused_last_in_first_out() -> None:
    pool = Pmad(64 * 1024, classes((32, 100)))
    handles = [pool.store(b"%d" % i) for i in range(10)]
    pool.free(handles[3])
    pool.free(handles[7])
    assert pool.allocate(1) == handles[7]
    assert pool.allocate(1) == handles[3]


def test_class_lookup_picks_the_smallest_fitting_class() -> None:
    pool = Pmad(1 << 20, classes((10, 25), (100, 25), (1000, 25), (5000, 25)))
    assert [pool.class_for(n) for n in (1, 10, 11, 100, 101, 1000, 1001, 5000)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]


def test_zero_and_too_large_requests_have_their_own_errors() -> None:
    pool = Pmad(1 << 16, classes((16, 50), (128, 50)))
    with pytest.raises(ZeroSizeAllocation):
        pool.allocate(0)
    with pytest.raises(AllocationTooLarge, match="129 bytes exceeds the largest size class"):
        pool.allocate(129)
    pool.allocate(128)


def test_exhaustion_spills_upward_then_fails_and_recovers() -> None:
    pool = Pmad(4096, classes((16, 50), (64, 50)))
    small, large = pool.blocks_total
    held = [pool.allocate(10) for _ in range(small)]
    assert pool.usage()[0].blocks_used == small
    # The 16-byte class is full: the next small request takes a 64-byte block.
    spilled = [pool.allocate(10) for _ in range(large)]
    assert pool.usage()[1].blocks_used == large
    before = pool.bytes_used
    with pytest.raises(PoolExhausted, match="no free block for 10 bytes"):
        pool.allocate(10)
    with pytest.raises(PoolExhausted):
        pool.allocate(64)
    assert pool.bytes_used == before
    pool.free(spilled[0])
    assert pool.allocate(64) == spilled[0]
    pool.free(held[0])
    assert pool.allocate(1) == held[0]


def test_every_block_can_be_used_and_returned() -> None:
    pool = Pmad(1 << 16, classes((16, 40), (48, 60)))
    handles = []
    while True:
        try:
            handles.append(pool.store(b"z" * 16))
        except PoolExhausted:
            break
    assert len(handles) == sum(pool.blocks_total)
    assert len(set(handles)) == len(handles)
    for handle in handles:
        pool.free(handle)
    assert pool.bytes_used == pool.metadata_bytes


def test_double_free_and_bogus_offsets_are_refused() -> None:
    pool = Pmad(1 << 16, classes((32, 100)))
    handle = pool.allocate(5)
    pool.free(handle)
    with pytest.raises(InvalidBlock):
        pool.free(handle)
    with pytest.raises(InvalidBlock):
        pool.free(handle + 1)
    with pytest.raises(InvalidBlock):
        pool.free(0)
    with pytest.raises(InvalidBlock):
        pool.free(1 << 20)
    assert pool.bytes_used == pool.metadata_bytes


def test_write_beyond_the_block_is_refused() -> None:
    pool = Pmad(1 << 16, classes((32, 100)))
    handle = pool.allocate(1)
    with pytest.raises(InvalidBlock):
        pool.write(handle, b"x" * 33)
    pool.write(handle, b"x" * 32)
    assert pool.read(handle) == b"x" * 32


@pytest.mark.parametrize(
    ("pool_size", "layout", "message", "index"),
    [
        (1 << 16, [], "no size classes", None),
        (1 << 16, classes((0, 100)), "class size 0 is out of range", 0),
        (1 << 30, classes((16, 50), (pmad.MAX_CLASS_SIZE + 1, 50)), "out of range", 1),
        (1 << 16, classes((64, 50), (32, 50)), "ascending order", 1),
        (1 << 16, classes((16, 50), (16, 50)), "ascending order", 1),
        (1 << 16, classes((16, 50), (32, 40)), "sum to 90, not 100", None),
        (1 << 16, classes((16, 0), (32, 100)), "percentage 0 is out of range", 0),
        (1 << 16, classes((16, 99), (4096, 1)), "gets no block", 1),
        (10, classes((16, 100)), "smaller than its", None),
        (1 << 16, classes(*[(i, 1) for i in range(1, 257)]), "at most 255", 255),
    ],
)
def test_bad_layouts_are_refused(pool_size, layout, message, index) -> None:
    with pytest.raises(LayoutError, match=message) as raised:
        Pmad(pool_size, layout)
    assert raised.value.index == index


def test_classes_beyond_the_reference_1kib_limit() -> None:
    pool = Pmad(8 << 20, classes((1024, 50), (1 << 20, 50)))
    payload = bytes(range(256)) * 4096
    handle = pool.store(payload)
    assert pool.read(handle) == payload
