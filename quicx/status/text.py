"""Numbers as the C{quicx} command shows them: counts, rates, durations, bars."""

from __future__ import annotations

NONE = "\N{EN DASH}"
"""What a latency without observations shows."""


def printable(text: str) -> str:
    """
    C{text} (a name a client chose: a task type) with every character a
    terminal would act on or break a line at -- control characters, line
    separators, format characters -- written as its Python escape
    (C{\\x1b}, C{\\n}, C{\\u202e}).
    """
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def thousands(value: int) -> str:
    return f"{value:,}"


def rate(per_second: float) -> str:
    """A rate: one decimal under 10, whole (with thousands separators) above."""
    if not per_second:
        return "0"
    if per_second < 9.95:
        return f"{per_second:.1f}"
    return thousands(round(per_second))


def latency(seconds: float | None) -> str:
    """A latency in 3 significant digits at most, in µs, ms, s or min; L{NONE} for C{None}."""
    if seconds is None:
        return NONE
    for unit, scale, below in (("µs", 1e6, 1000), ("ms", 1e3, 1000), ("s", 1, 60)):
        shown = f"{seconds * scale:.3g}"
        if float(shown) < below:  # so 999.7 µs shows as 1ms, not 1e+03µs
            return shown + unit
    return f"{seconds / 60:.3g}min"


def human_duration(seconds: float) -> str:
    seconds = int(seconds)
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    if days:
        return f"{days}d {hours:02d}h {minutes:02d}m"
    if hours:
        return f"{hours}h {minutes:02d}m {seconds:02d}s"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def bar(used: int, total: int, width: int = 20) -> str:
    filled = round(width * used / total) if total else 0
    if used and not filled:
        filled = 1  # never show a used resource as empty
    return "[" + "█" * filled + "░" * (width - filled) + "]"
