"""Waiting for a condition the code under test reaches on its own: the one polling helper.

A test waits for a signal, never for a time: ``eventually`` polls a predicate until it is
truthy and returns that value, or fails with what it was waiting for once a generous
timeout has passed (CI runs on two busy cores). ``abort`` lets a caller stop early
with its own message, e.g. when the process it waits on has died.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["eventually", "eventually_async"]


def eventually(
    predicate: Callable[[], T | None],
    what: str = "a condition",
    *,
    timeout: float = 60.0,
    interval: float = 0.01,
    abort: Callable[[], str | None] = lambda: None,
) -> T:
    """Poll ``predicate()`` until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        reason = abort()
        if reason is not None:
            raise AssertionError(f"gave up waiting for {what}: {reason}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} ({timeout:g} s)")
        time.sleep(interval)


async def eventually_async(
    predicate: Callable[[], T | None], what: str = "a condition", *, timeout: float = 5.0, interval: float = 0.002
) -> T:
    """:func:`eventually` inside an event loop: the code under test runs between the polls."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)
