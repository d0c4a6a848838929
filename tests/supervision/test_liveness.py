"""The supervision side of a hung worker, whole: a supervisor that stops hearing a ready worker's
heartbeat gives it up, stops it, and fails its model. Its parts are tested alone in ``test_heartbeats.py``,
``test_leases.py`` and ``test_hang_watch.py``."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.supervision.fakes import FakeHeartbeat, rig, until


async def test_a_supervisor_gives_a_silent_worker_up_and_its_end_fails_the_model(tmp_path: Path) -> None:
    probe = FakeHeartbeat()
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
