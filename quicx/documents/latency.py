"""
The latency histograms of a status document's telemetry: their bucket
bounds, and a percentile read from bucket counts.
"""

from __future__ import annotations

from collections.abc import Sequence

LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
)
"""Upper bounds (seconds) of the wait- and run-time buckets; a last one takes the rest."""


def quantile(
    counts: Sequence[int], fraction: float, bounds: Sequence[float] = LATENCY_BUCKETS
) -> float | None:
    """
    The C{fraction} quantile (0 to 1) of bucket C{counts} (each bucket's
    own count, one more than C{bounds}, the buckets' upper bounds),
    interpolated linearly inside its bucket, as Prometheus'
    C{histogram_quantile} does; C{None} with no observations.  One past the
    last bound is answered with the last bound.
    """
    total = sum(counts)
    if not total:
        return None
    rank = fraction * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index == len(bounds):
                return bounds[-1]
            lower = bounds[index - 1] if index else 0.0
            upper = bounds[index]
            return lower + (upper - lower) * max(0.0, rank - seen) / count
        seen += count
    return bounds[-1]
