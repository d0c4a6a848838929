"""The hang watch of a node's ready workers (:mod:`service.supervision.hang_watch`): their heartbeats
asked, the core's hang decision applied, and a hung worker's requests cut at once. A real log, a fake
clock, a fake heartbeat; the supervisor's planning pass (``tick``) runs the check, as in production."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.supervision.leases import Lease, WorkerUnresponsive
from tests.supervision.fakes import FakeHeartbeat, Rig, rig, until


def _request_to(r: Rig, endpoint: str) -> tuple[Lease, asyncio.Task[None]]:
    """A request in flight to the worker at ``endpoint``: its lease, and its wait for an answer."""
    lease = Lease("a", endpoint, r.sup.hangs.leases.discard)
    r.sup.hangs.leases.add(lease)

    async def waiting() -> None:
        async with lease.guard():
            await asyncio.Event().wait()  # a worker that never answers

    return lease, asyncio.create_task(waiting())


async def test_a_silent_worker_past_its_bound_is_given_up_and_its_requests_cut_at_once(tmp_path: Path) -> None:
    probe = FakeHeartbeat()
    async with rig(tmp_path, hang_timeout=5.0, heartbeat=probe) as r:
        r.spawner.obeys = False
        await r.sup.load("a")
        child = await r.ready("a")
        endpoint = f"http://127.0.0.1:{child.pid}"
        _, request = _request_to(r, endpoint)
        await r.sup.tick()
        await until(lambda: probe.asked >= 1, what="the busy worker asked")
        probe.alive = False
        r.clock.advance(6.0)
        await r.sup.tick()
        with pytest.raises(WorkerUnresponsive):
            await asyncio.wait_for(request, 30)
        assert "instance_unresponsive" in r.types("a")


async def test_a_worker_that_answers_keeps_its_requests(tmp_path: Path) -> None:
    probe = FakeHeartbeat()
    async with rig(tmp_path, hang_timeout=5.0, heartbeat=probe) as r:
        await r.sup.load("a")
        child = await r.ready("a")
        lease, request = _request_to(r, f"http://127.0.0.1:{child.pid}")
        for second in range(1, 4):  # steps move on: each heartbeat shows progress
            probe.steps = second
            r.clock.advance(3.0)
            await r.sup.tick()
            await until(lambda s=second: probe.asked >= s, what=f"heartbeat {second}")
        await r.sup.tick()
        assert "instance_unresponsive" not in r.types("a") and not request.done() and not lease.cut
        request.cancel()


async def test_with_the_hang_timeout_off_no_worker_is_asked(tmp_path: Path) -> None:
    probe = FakeHeartbeat()
    async with rig(tmp_path, hang_timeout=0, heartbeat=probe) as r:
        await r.sup.load("a")
        await r.ready("a")
        r.clock.advance(600.0)
        await r.sup.tick()
        assert probe.asked == 0 and r.sup.hangs.heartbeats.beats == {}
        assert "instance_unresponsive" not in r.types("a")
