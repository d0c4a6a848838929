"""The supervision side of a hung worker: heartbeats asked and kept (:mod:`service.supervision.heartbeats`),
requests cut at once (:mod:`service.supervision.leases`), and a supervisor that carries the decision out."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from service.core.liveness import HEARTBEAT_S, IDLE_HEARTBEAT_S
from service.supervision.heartbeats import Heartbeats
from service.supervision.leases import Lease, Leases, WorkerUnresponsive
from tests.supervision.fakes import FakeClock, rig, until


class _Probe:
    """A worker's heartbeat: answers ``steps`` while ``alive``, else nothing (as a stopped process)."""

    def __init__(self) -> None:
        self.alive = True
        self.steps = 0
        self.asked = 0

    async def __call__(self, endpoint: str, timeout: float) -> Mapping[str, Any] | None:
        self.asked += 1
        return {"steps": self.steps, "step_s": None} if self.alive else None


class TestHeartbeats:
    async def test_an_answer_becomes_the_beat_and_silence_leaves_the_last_one(self) -> None:
        clock, probe = FakeClock(), _Probe()
        beats = Heartbeats(clock, probe)
        beats.watch({"i1": "http://w"}, busy={"http://w"})
        await until(lambda: probe.asked == 1 and not beats._out, what="the first question answered")
        assert beats.beats["i1"].seen_at == clock.mono
        probe.alive, probe.steps = False, 5
        clock.advance(HEARTBEAT_S)
        beats.watch({"i1": "http://w"}, busy={"http://w"})
        await until(lambda: probe.asked == 2 and not beats._out, what="the second question, unanswered")
        assert beats.beats["i1"].seen_at == clock.mono - HEARTBEAT_S and beats.beats["i1"].steps == 0

    async def test_a_worker_is_asked_once_a_heartbeat_and_forgotten_once_unwatched(self) -> None:
        clock, probe = FakeClock(), _Probe()
        beats = Heartbeats(clock, probe)
        beats.watch({"i1": "http://w"}, busy={"http://w"})
        await until(lambda: not beats._out, what="the question answered")
        beats.watch({"i1": "http://w"}, busy={"http://w"})  # a planning pass within the same heartbeat asks nothing
        await asyncio.sleep(0)
        assert probe.asked == 1
        beats.watch({})
        assert beats.beats == {}
        await beats.close()

    async def test_an_idle_worker_is_asked_less_often_and_a_busy_one_each_heartbeat(self) -> None:
        clock, probe = FakeClock(), _Probe()
        beats = Heartbeats(clock, probe)
        beats.watch({"i1": "http://w"})
        await until(lambda: probe.asked == 1 and not beats._out, what="the first question answered")
        clock.advance(HEARTBEAT_S)
        beats.watch({"i1": "http://w"})  # idle: not due yet
        await asyncio.sleep(0)
        assert probe.asked == 1
        beats.watch({"i1": "http://w"}, busy={"http://w"})  # a request in flight: due each heartbeat
        await until(lambda: probe.asked == 2 and not beats._out, what="the busy worker asked")
        clock.advance(IDLE_HEARTBEAT_S)
        beats.watch({"i1": "http://w"})
        await until(lambda: probe.asked == 3 and not beats._out, what="the idle worker asked again")
        await beats.close()


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


async def test_a_supervisor_gives_a_silent_worker_up_and_its_end_fails_the_model(tmp_path: Path) -> None:
    probe = _Probe()
    async with rig(tmp_path, hang_timeout=5.0, heartbeat=probe) as r:
        r.spawner.obeys = False  # a stopped process: only SIGKILL ends it
        await r.sup.load("a")
        child = await r.ready("a")
        await until(lambda: probe.asked >= 1, what="a heartbeat")
        probe.alive = False
        r.clock.advance(4.0)
        for _ in range(2):  # planning passes 4 s into the silence: still within the bound
            await r.sup.tick()
        assert "instance_unresponsive" not in r.types("a")
        r.clock.advance(2.0)
        await until(lambda: "instance_unresponsive" in r.types("a"), what="instance_unresponsive")
        await until(lambda: "instance_stopped" in r.types("a"), what="the end")  # SIGKILL after the stop grace
        assert child.signals[-1] == signal.SIGKILL
        model = r.live.state.models["a"]
        assert model.failed and model.last_error is not None and model.last_error.reason == "unresponsive"
