"""The real outside world's clock and ids: the one place the service reads the wall clock and draws uuids.

Supervision and the API never call ``datetime.now``, ``time.time`` or ``uuid4``
themselves: they are handed a clock and id sources (``Surroundings``, the API's
providers), whose defaults are these. Tests hand fakes instead.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

__all__ = ["SystemClock", "new_instance_id", "new_job_id", "new_request_id"]


class SystemClock:
    """The wall clock (UTC) and the monotonic one."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def new_instance_id() -> str:
    """An inference instance's id: 12 hex digits."""
    return uuid.uuid4().hex[:12]


def new_job_id() -> str:
    """A download job's id: a UUID."""
    return str(uuid.uuid4())


def new_request_id() -> str:
    """The id of a request that brings no ``X-Request-ID``: 32 hex digits."""
    return uuid.uuid4().hex
