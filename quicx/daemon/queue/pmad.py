"""
PMAD: the pool memory allocator that holds every task payload.

One pool is reserved at start (an anonymous C{mmap}) and never grows.  It is
split into:

  - a metadata carve-out at its start: the class lookup table, one byte per
    C{granularity} bytes of request size, mapping a request size to the
    smallest class that holds it;
  - one run of equal blocks per size class, each run taking the configured
    percentage of what is left.

Each block starts with a 16-byte header (next-free offset, payload length,
class index, state), so freeing needs nothing but the block's offset and the
free lists are threaded through the pool itself: the allocator keeps no
per-block Python objects, and its footprint outside the pool is a handful of
lists of one entry per class.

Allocation is a table lookup plus a free-list pop; free is a push: O(1).  When
the exact class is exhausted the request spills into the next larger class
with a free block, so a pool is only "full" for a size when no class that can
hold it has room.  That scan is bounded by the number of classes.
"""

from __future__ import annotations

import mmap
import struct
from decimal import Decimal
from fractions import Fraction
from math import gcd

from attrs import frozen

from quicx.protocol.codec import MAX_PAYLOAD

BLOCK_HEADER = struct.Struct("<QIHBx")
"""next free block offset + 1 (0: none), payload length, class index, state."""
BLOCK_HEADER_SIZE = BLOCK_HEADER.size
_NEXT = struct.Struct("<Q")
_LENGTH = struct.Struct("<I")

MAX_CLASSES = 255
MIN_CLASS_SIZE = 1
MAX_CLASS_SIZE = MAX_PAYLOAD
"""The largest block payload: 1 MiB (the reference stops at 1 KiB)."""

_FREE = 0
_USED = 1


class PmadError(Exception):
    """Base class of every allocator error."""


class LayoutError(PmadError):
    """
    The size classes do not describe a usable pool.

    @ivar index: the position (0-based) of the offending class, or C{None}
        when the problem is the layout as a whole.
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ZeroSizeAllocation(PmadError):
    """A block of zero bytes was requested."""


class AllocationTooLarge(PmadError):
    """The request is larger than the largest size class."""


class PoolExhausted(PmadError):
    """No class that can hold the request has a free block."""


class InvalidBlock(PmadError):
    """
    The offset is not a live block (a double free, or not a block at all), or
    the data does not fit the block.
    """


@frozen
class SizeClass:
    """One size class: block payload size in bytes, and its share of the pool."""

    size: int
    percent: Decimal


@frozen
class ClassUsage:
    """How one size class is used, for the status view."""

    size: int
    blocks_total: int
    blocks_used: int


def check_classes(classes: list[SizeClass]) -> None:
    """
    Check what can be checked of a layout without a pool size.

    @raise LayoutError: naming the offending class by index.
    """
    if not classes:
        raise LayoutError("no size classes")
    if len(classes) > MAX_CLASSES:
        raise LayoutError(
            f"{len(classes)} size classes, at most {MAX_CLASSES} allowed", MAX_CLASSES
        )
    previous = 0
    for index, size_class in enumerate(classes):
        if not MIN_CLASS_SIZE <= size_class.size <= MAX_CLASS_SIZE:
            raise LayoutError(
                f"class size {size_class.size} is out of range"
                f" ({MIN_CLASS_SIZE} to {MAX_CLASS_SIZE} bytes)",
                index,
            )
        if size_class.size <= previous:
            raise LayoutError(
                f"class size {size_class.size} is not larger than the previous"
                f" class ({previous}); classes must be in ascending order",
                index,
            )
        if not 0 < size_class.percent <= 100:
            raise LayoutError(
                f"class percentage {size_class.percent} is out of range (0 to 100]",
                index,
            )
        previous = size_class.size
    total = sum(c.percent for c in classes)
    if total != 100:
        raise LayoutError(f"class percentages sum to {total}, not 100")


@frozen
class Layout:
    """
    Where a pool's parts lie: what L{Pmad} reserves and carves, computed
    without reserving anything (the configuration checks a layout with it).

    @ivar granularity: the request sizes one lookup-table entry covers.
    @ivar table_length: the lookup table's entries.
    @ivar metadata_bytes: the carve-out for the table, 16-byte aligned.
    @ivar starts: each class's first block's offset.
    @ivar strides: each class's block size, header included.
    @ivar blocks: each class's block count.
    """

    granularity: int
    table_length: int
    metadata_bytes: int
    starts: tuple[int, ...]
    strides: tuple[int, ...]
    blocks: tuple[int, ...]


def layout(pool_size: int, classes: list[SizeClass]) -> Layout:
    """
    How a pool of C{pool_size} bytes is split into C{classes}: pure
    arithmetic, nothing allocated.

    @raise LayoutError: the classes describe no usable pool, naming the
        offending class by index when one is.
    """
    check_classes(classes)
    sizes = [c.size for c in classes]
    granularity = 0
    for size in sizes:
        granularity = gcd(granularity, size)
    table_length = sizes[-1] // granularity + 1
    # Round the carve-out up so block runs start 16-byte aligned.
    metadata_bytes = -(-table_length // 16) * 16
    usable = pool_size - metadata_bytes
    if usable <= 0:
        raise LayoutError(
            f"pool of {pool_size} bytes is smaller than its {metadata_bytes}-byte lookup table"
        )
    starts, strides, counts = [], [], []
    offset = metadata_bytes
    for index, size_class in enumerate(classes):
        stride = BLOCK_HEADER_SIZE + size_class.size
        blocks = int(Fraction(usable) * Fraction(size_class.percent) / 100) // stride
        if blocks == 0:
            raise LayoutError(
                f"class {size_class.size} B at {size_class.percent}% of a"
                f" {pool_size}-byte pool gets no block of {stride} bytes",
                index,
            )
        starts.append(offset)
        strides.append(stride)
        counts.append(blocks)
        offset += blocks * stride
    return Layout(
        granularity, table_length, metadata_bytes, tuple(starts), tuple(strides), tuple(counts)
    )


class Pmad:
    """
    The allocator over one reserved pool.

    Block handles are the blocks' offsets in the pool (plain C{int}s).

    @ivar pool_size: bytes reserved, all of them accounted in L{bytes_total}.
    @ivar metadata_bytes: the carve-out for the lookup table.
    @ivar max_size: the largest request that can be satisfied.
    """

    def __init__(self, pool_size: int, classes: list[SizeClass]) -> None:
        plan = layout(pool_size, classes)
        self.pool_size = pool_size
        self.classes = tuple(classes)
        sizes = [c.size for c in classes]
        self.max_size = sizes[-1]
        granularity = self._granularity = plan.granularity
        table_length = plan.table_length
        self.metadata_bytes = plan.metadata_bytes
        self._stride = list(plan.strides)
        self._start = list(plan.starts)
        self._limit = [
            start + blocks * stride
            for start, blocks, stride in zip(plan.starts, plan.blocks, plan.strides, strict=True)
        ]
        self.blocks_total = list(plan.blocks)
        self.blocks_used = [0] * len(classes)
        # Free list heads store offset + 1 so that 0 means "empty"; blocks
        # never handed out yet are taken from a bump pointer, so start-up
        # costs O(classes), not O(blocks).
        self._free_head = [0] * len(classes)
        self._bump = list(self._start)
        self.bytes_used = self.metadata_bytes

        self._pool = mmap.mmap(-1, pool_size)
        table = memoryview(self._pool)[:table_length]
        class_index = 0
        for entry in range(table_length):
            while sizes[class_index] < entry * granularity:
                class_index += 1
            table[entry] = class_index
        table.release()

    @property
    def bytes_total(self) -> int:
        return self.pool_size

    def usage(self) -> list[ClassUsage]:
        """Per-class block counts."""
        return [
            ClassUsage(c.size, total, used)
            for c, total, used in zip(
                self.classes, self.blocks_total, self.blocks_used, strict=True
            )
        ]

    def class_for(self, size: int) -> int:
        """The index of the smallest class whose blocks hold C{size} bytes."""
        if size <= 0:
            raise ZeroSizeAllocation("zero-byte allocation")
        if size > self.max_size:
            raise AllocationTooLarge(
                f"{size} bytes exceeds the largest size class ({self.max_size} bytes);"
                " a larger [allocator] class takes it"
            )
        return self._pool[-(-size // self._granularity)]

    def allocate(self, size: int) -> int:
        """
        Take a block that holds C{size} bytes; return its handle.

        @raise ZeroSizeAllocation: C{size} is 0.
        @raise AllocationTooLarge: C{size} exceeds the largest class.
        @raise PoolExhausted: no class from the fitting one up has a free block.
        """
        return self._take(size, 0)

    def _take(self, size: int, length: int) -> int:
        """Allocate for C{size} bytes; the block's header records C{length}."""
        # class_for(size), inlined where it cannot raise (the hot path).
        if 0 < size <= self.max_size:
            first = self._pool[-(-size // self._granularity)]
        else:
            first = self.class_for(size)
        pool = self._pool
        for index in range(first, len(self._stride)):
            head = self._free_head[index]
            if head:
                offset = head - 1
                self._free_head[index] = _NEXT.unpack_from(pool, offset)[0]
            elif self._bump[index] < self._limit[index]:
                offset = self._bump[index]
                self._bump[index] = offset + self._stride[index]
            else:
                continue
            BLOCK_HEADER.pack_into(pool, offset, 0, length, index, _USED)
            self.blocks_used[index] += 1
            self.bytes_used += self._stride[index]
            return offset
        raise PoolExhausted(
            f"no free block for {size} bytes (classes of {self.classes[first].size}"
            f" bytes and up are exhausted); a larger [allocator] pool_size holds more"
        )

    def write(self, handle: int, data: bytes) -> None:
        """Store C{data} in the block C{handle}, replacing what it held."""
        _, _, index, state = BLOCK_HEADER.unpack_from(self._pool, handle)
        if state != _USED or len(data) > self._stride[index] - BLOCK_HEADER_SIZE:
            raise InvalidBlock(f"cannot write {len(data)} bytes to block {handle}")
        _LENGTH.pack_into(self._pool, handle + 8, len(data))
        start = handle + BLOCK_HEADER_SIZE
        self._pool[start : start + len(data)] = data

    def store(self, data: bytes) -> int:
        """
        Allocate a block for C{data}, copy it in, return the handle.  Empty
        C{data} takes a block of the smallest class (the queue counts on every
        task holding one).
        """
        length = len(data)
        handle = self._take(length or 1, length)
        start = handle + BLOCK_HEADER_SIZE
        self._pool[start : start + length] = data
        return handle

    def read(self, handle: int) -> bytes:
        """Return a copy of the bytes stored in block C{handle}."""
        length = _LENGTH.unpack_from(self._pool, handle + 8)[0]
        start = handle + BLOCK_HEADER_SIZE
        return self._pool[start : start + length]

    def head(self, handle: int, limit: int) -> bytes:
        """Return a copy of the first C{limit} bytes (at most) stored in block C{handle}."""
        length = _LENGTH.unpack_from(self._pool, handle + 8)[0]
        start = handle + BLOCK_HEADER_SIZE
        return self._pool[start : start + min(length, limit)]

    def capacity(self, handle: int) -> int:
        """The most bytes block C{handle} holds: its class's size."""
        index: int = BLOCK_HEADER.unpack_from(self._pool, handle)[2]
        return self._stride[index] - BLOCK_HEADER_SIZE

    def free(self, handle: int) -> None:
        """
        Return block C{handle} to its class.

        @raise InvalidBlock: the block is not live.
        """
        if not self.metadata_bytes <= handle < self.pool_size - BLOCK_HEADER_SIZE:
            raise InvalidBlock(f"offset {handle} is outside the block area")
        _, _, index, state = BLOCK_HEADER.unpack_from(self._pool, handle)
        if (
            state != _USED
            or index >= len(self._stride)
            or (handle - self._start[index]) % self._stride[index]
        ):
            raise InvalidBlock(f"offset {handle} is not a live block")
        BLOCK_HEADER.pack_into(self._pool, handle, self._free_head[index], 0, index, _FREE)
        self._free_head[index] = handle + 1
        self.blocks_used[index] -= 1
        self.bytes_used -= self._stride[index]

    def close(self) -> None:
        """Release the pool."""
        self._pool.close()


def default_classes() -> list[SizeClass]:
    """
    The reference product's built-in layout: 64 classes from 16 to 1024 bytes
    in 16-byte steps; 64 B gets 12 %, 16 B and 32 B get 2 % each, every other
    class 1 %, and the leftover points go one each to the widest classes.
    """
    sizes = list(range(16, 1025, 16))
    points = {size: 1 for size in sizes}
    points.update({16: 2, 32: 2, 64: 12})
    leftover = 100 - sum(points.values())
    for size in sizes[-leftover:]:
        points[size] += 1
    return [SizeClass(size, Decimal(points[size])) for size in sizes]


DEFAULT_POOL_SIZE = 8 * 1024 * 1024
