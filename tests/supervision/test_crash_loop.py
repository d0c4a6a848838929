"""A model that crashes on its first request: the request is told why, and a third autoload is refused."""

from __future__ import annotations

import signal
from pathlib import Path

from service.core import events as ev
from tests.supervision.fakes import Rig, rig, until
from tests.supervision.test_instances import Request


async def _crash_serving_a_first_request(r: Rig, sig: int = signal.SIGSEGV) -> None:
    request = Request(r, "a")
    child = await r.ready("a")
    await request.served()  # the lease is held: the request is in flight
    child.exit(None, sig)
    await until(lambda: r.state.models["a"].instance is None, what="the crash folded")
    await request.done()


async def test_the_crash_is_recorded_with_the_requests_in_flight(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await _crash_serving_a_first_request(r)
        crashed = r.state.models["a"]
        error = crashed.last_error.to_json() if crashed.last_error else {}
        assert crashed.failed and "instance_crashed" in r.types("a")
        assert error["first_request"] is True and error["signal_name"] == "SIGSEGV"
        assert r.state.models["a"].first_request_crashes == 1


async def test_two_first_request_crashes_then_autoload_is_refused_but_an_explicit_load_starts_it(
    tmp_path: Path,
) -> None:
    async with rig(tmp_path) as r:
        await _crash_serving_a_first_request(r)
        await _crash_serving_a_first_request(r, signal.SIGILL)
        third = Request(r, "a")
        refused = await third.failed()
        assert refused.code == "model_failed" and refused.extra["reason"] == "crash_loop"
        assert "SIGILL" in refused.message and "2 times in a row" in refused.message
        assert r.types("a").count("instance_requested") == 2  # no third worker was spawned
        await r.sup.load("a")  # the user asks: it starts
        assert r.state.models["a"].instance is not None


async def test_restart_on_failure_keeps_its_backoff_in_a_crash_loop(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.worker("a", ev.ModelConfigured(restart="on-failure"))
        delays = []
        for _ in range(2):
            await _crash_serving_a_first_request(r)
            await until(lambda: "a" in r.sup.restarts_pending, what="a restart scheduled")
            delays.append(r.sup.restarts_pending["a"] - r.clock.monotonic())
            r.clock.advance(delays[-1])
            await r.sup.tick()
            assert r.state.models["a"].instance is not None  # restarted by the policy, not refused
        assert r.state.models["a"].first_request_crashes == 2 and delays[1] > delays[0]  # backing off
