"""The instances' worker processes (``service/supervision/instance_processes.py``) and the ids and
ports they start with: real log and decisions, fake processes and clock.

Ids and ports are drawn by the supervisor before a decision, as many as it starts: a model that
waits for a slot draws none however many passes it waits, and each worker is spawned with the
id and port drawn for it.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from service.core import events as ev
from tests.supervision.fakes import FakeChild, rig, until
from tests.supervision.test_instances import Request


def _port(child: FakeChild) -> int:
    argv = list(child.argv)
    return int(argv[argv.index("--port") + 1])


async def test_a_model_waiting_for_a_slot_draws_no_id_or_port_until_it_starts(tmp_path: Path) -> None:
    async with rig(tmp_path, models_max=1) as r:
        busy = Request(r, "a")
        first = await r.ready("a")
        await busy.served()  # a is busy: b cannot evict it
        waiting = Request(r, "b")
        for _ in range(3):
            await r.sup.tick()  # passes that plan b and find no slot
        assert r.state.models["b"].instance is None
        await busy.done()
        second = await r.ready("b")
        await waiting.served()
        await waiting.done()
        assert (first.instance_id, _port(first)) == ("i1", 20000)
        assert (second.instance_id, _port(second)) == ("i2", 20001), "nothing was drawn while b waited"


async def test_a_stop_that_came_before_the_spawn_skips_the_spawn(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        paused, go = asyncio.Event(), asyncio.Event()

        async def pause(_seconds: float) -> None:
            paused.set()
            await go.wait()

        r.clock.sleep = pause  # type: ignore[method-assign]  # the spawn's fake-timing pause holds it
        r.sup.fake_timing = True
        await r.sup.load("a")
        await asyncio.wait_for(paused.wait(), 5)
        await r.sup.unload("a")  # the stop comes first: nothing to stop, its end recorded
        go.set()
        await until(lambda: "instance_stopped" in r.types("a"), what="the stop recorded")
        await until(lambda: not r.sup.interpreter.background, what="the spawn, let go, to finish")
        assert r.spawner.children == [], "no worker for an instance stopped before its spawn"
        assert r.state.models["a"].instance is None


async def test_a_worker_is_told_why_it_stops_and_given_its_models_own_stop_timeout(tmp_path: Path) -> None:
    async with rig(tmp_path, stop_timeout=30) as r:
        await r.worker("a", ev.ModelConfigured(stop_timeout=0.05))
        r.spawner.obeys = False  # ignores its stop line and SIGTERM: only SIGKILL ends it
        await r.sup.load("a")
        child = await r.ready("a")
        async with asyncio.timeout(10):  # the global 30 s would not end it in time
            await r.sup.unload("a")  # returns once the worker is gone
        assert child.lines == ["stop unload"] and child.signals == [signal.SIGTERM, signal.SIGKILL]
