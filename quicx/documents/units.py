"""How a document's numbers read to a person, wherever they are shown."""

from __future__ import annotations


def format_size(count: float) -> str:
    """C{8388608} -> C{'8.0 MiB'}: the human reading of a byte count."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")
