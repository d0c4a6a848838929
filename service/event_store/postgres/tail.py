"""The service's tail on PostgreSQL: LISTEN for the NOTIFY every append sends at commit.

A notification is only a wake-up: the tail then reads by position, as it does on its
safety-net poll, so a notification lost (sent while the tail reconnected, or the server
restarted) costs latency, never an event. A lost connection wakes the tail too, whose next
read then fails and is retried on a new connection (``LiveState``'s supervised restart).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from service.event_store.postgres.sql import CHANNEL


async def listen(conn: AsyncConnection, wake: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    """LISTEN on ``conn``'s asyncpg connection; returns the coroutine function that stops it."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection  # asyncpg.Connection: LISTEN needs the driver itself

    def on_notify(*_args: Any) -> None:
        wake()

    def on_lost(*_args: Any) -> None:
        wake()

    # Before the tail's first read: an append committed between the two is read, not missed.
    await driver.add_listener(CHANNEL, on_notify)
    driver.add_termination_listener(on_lost)

    async def unlisten() -> None:
        with contextlib.suppress(Exception):  # the connection may be gone already
            driver.remove_termination_listener(on_lost)
            await driver.remove_listener(CHANNEL, on_notify)

    return unlisten
