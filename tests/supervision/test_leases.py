"""The requests in flight to a worker, and the cut that ends them at once when it is given up as hung
(:mod:`service.supervision.leases`)."""

from __future__ import annotations

import asyncio

import pytest

from service.supervision.leases import Lease, Leases, WorkerUnresponsive


class TestLeases:
    async def test_a_cut_ends_the_wait_under_way_and_every_later_one(self) -> None:
        leases = Leases()
        lease = Lease("m", "http://w", lambda held: leases.discard(held))
        leases.add(lease)

        async def wait_on_worker() -> None:
            async with lease.guard():
                await asyncio.Event().wait()  # a worker that never answers

        waiting = asyncio.create_task(wait_on_worker())
        await asyncio.sleep(0)
        assert leases.cut("http://other") == 0 and not waiting.done()
        assert leases.cut("http://w") == 1
        with pytest.raises(WorkerUnresponsive):
            await waiting
        with pytest.raises(WorkerUnresponsive):
            async with lease.guard():
                pass
        lease.release()
        assert leases.cut("http://w") == 0

    async def test_a_timeout_that_is_not_a_cut_is_left_alone(self) -> None:
        lease = Lease("m", "http://w", lambda _: None)
        with pytest.raises(TimeoutError):
            async with lease.guard(), asyncio.timeout(0.01):
                await asyncio.Event().wait()
