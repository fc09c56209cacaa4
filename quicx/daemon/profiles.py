"""
Profiles: ready-made configurations that C{quicx init --profile NAME} writes.

The built-in configuration stays the reference product's (an 8 MiB pool,
classes up to 1 KiB): a daemon started without a file behaves as the
reference does.  A profile is the way out for real payloads: a few settings
changed from the built-in ones, written by L{quicx.daemon.config.render} with notes
that state the memory the daemon will reserve and what its pool holds,
figures taken from the allocator's own arithmetic (a pool laid out, not
reserved), so that they are the ones the daemon reports once started.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from attrs import frozen

from quicx.daemon.config import Config, validate, with_settings
from quicx.daemon.queue import pmad
from quicx.documents.units import format_size


@frozen
class Profile:
    """
    A named set of settings for C{quicx init --profile}.

    @ivar summary: what it is for, one line (C{quicx init --help}).
    @ivar settings: the settings it sets (by L{Setting.name}), with their values.
    """

    name: str
    summary: str
    settings: Mapping[str, Any]

    def config(self) -> Config:
        """The built-in configuration with this profile's settings."""
        config = with_settings(Config(), **self.settings)
        validate(config)
        return config


def _classes(*layout: tuple[int, int]) -> tuple[pmad.SizeClass, ...]:
    return tuple(pmad.SizeClass(size, Decimal(percent)) for size, percent in layout)


PRODUCTION = Profile(
    "production",
    "payloads and results up to 256 KiB in a 256 MiB pool",
    {
        "pool_size": 256 << 20,
        # Sizes double, so a payload wastes less than half its block; the
        # small classes hold the most tasks, the large ones the most bytes.
        "classes": _classes(
            (64, 4),
            (128, 4),
            (256, 4),
            (512, 6),
            (1 << 10, 8),
            (2 << 10, 8),
            (4 << 10, 8),
            (8 << 10, 8),
            (16 << 10, 8),
            (32 << 10, 8),
            (64 << 10, 10),
            (128 << 10, 12),
            (256 << 10, 12),
        ),
        "result_max_size": 256 << 10,
    },
)

PROFILES = {profile.name: profile for profile in (PRODUCTION,)}


def _size(count: int) -> str:
    """C{262144} -> C{'256 KiB'}; C{format_size}'s reading when it is no whole unit."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} B" if count < 1024 else format_size(count)


@frozen
class Reservation:
    """
    What a configuration's pool reserves and holds, as its allocator lays it out.

    @ivar blocks: each class's size, percent and block count.
    @ivar max_result: the longest result an ACK may carry (the daemon's rule).
    """

    pool_size: int
    blocks: tuple[tuple[pmad.SizeClass, int], ...]
    max_result: int

    @classmethod
    def of(cls, config: Config) -> Reservation:
        allocator = config.allocator
        blocks = tuple(zip(allocator.classes, allocator.layout().blocks, strict=True))
        largest = allocator.classes[-1].size
        return cls(allocator.pool_size, blocks, min(config.results.max_size, largest))

    @property
    def largest(self) -> int:
        return self.blocks[-1][0].size

    def line(self, profile: Profile) -> str:
        """One line for the terminal."""
        total = sum(count for _, count in self.blocks)
        return (
            f"quicx init: profile {profile.name} reserves a {_size(self.pool_size)} pool"
            f" ({self.pool_size:,} bytes) at start: {len(self.blocks)} size classes,"
            f" {total:,} blocks; payloads up to {_size(self.largest)},"
            f" results up to {_size(self.max_result)}"
        )

    def notes(self, profile: Profile) -> list[str]:
        """The comment lines at the head of the profile's file."""
        return [
            "",
            f"Profile {profile.name}: {profile.summary}.",
            f"Memory: the daemon reserves its pool at start, {_size(self.pool_size)}"
            f" ({self.pool_size:,} bytes),",
            "resident as its blocks are used; its whole memory stays within the bound in",
            'docs/operations.md ("Memory"): pool_size + about 56 MiB + 500 B a live task + ...',
            f"Payloads up to {_size(self.largest)} ([allocator] class), results up to"
            f" {_size(self.max_result)} ([results] max_size).",
            "Blocks: each holds one task's payload or one kept result, in the smallest class",
            "that holds it (a larger one when that one is full). More of each: raise",
            'pool_size (docs/operations.md, "Sizing a pool").',
            *(
                f"  {c.size:>9} B {_size(c.size) if c.size >= 1024 else '':>9}"
                f" {count:>10,} blocks {c.percent:>3}%"
                for c, count in self.blocks
            ),
        ]
