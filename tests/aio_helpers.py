"""What the asyncio client's and worker's tests share: a loop to run on (asyncio's, or uvloop's)."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

Runner = Callable[[Coroutine[Any, Any, T]], T]


def runner(name: str) -> Runner[Any]:
    """C{asyncio.run}, or uvloop's (the test skips where uvloop is not installed)."""
    if name == "asyncio":
        return asyncio.run
    try:
        return importlib.import_module("uvloop").run
    except ImportError:
        pytest.skip("uvloop is not installed")


LOOPS = ["asyncio", "uvloop"]


async def until(condition: Callable[[], Awaitable[bool] | bool], timeout: float = 30.0) -> None:
    """Wait, generously, until C{condition} holds."""
    async with asyncio.timeout(timeout):
        while True:
            held = condition()
            if not isinstance(held, bool):
                held = await held
            if held:
                return
            await asyncio.sleep(0.02)
