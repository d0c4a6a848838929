"""The one writer (``service/supervision/interpreter.py``), on its own: a real SQLite log and its
live state, a fake clock for the retries, effects that say what they saw.

A decision's events are in the log before any of its effects runs; a decision that does not land
(refused, the tail down, the log's disk full) performs nothing; a conflict with another writer
decides again; ``apply_durably`` waits out a full disk; ``record_later`` and ``record_unread``
write facts off the caller's path; ``close`` cancels what effects still run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from service.core import events as ev
from service.core.decision import Append, Decision, Effect
from service.core.errors import CommandRejected
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent
from service.event_store.live_state import LiveState, StateUnavailable
from service.event_store.rows import FULL_RETRY_FIRST_S, LogDiskFull
from service.event_store.statements import EventFilter
from service.event_store.worker_writer import open_writer
from service.recovery.migrate import upgrade
from service.supervision.interpreter import Interpreter
from tests.eventually import eventually_async
from tests.small_disks import mounted
from tests.supervision.fakes import FakeClock


@dataclass(frozen=True, slots=True)
class Note(Effect):
    """An effect that records, as it runs, whether the fold (fed only from the log) has model ``a`` pinned."""

    text: str


@dataclass(frozen=True, slots=True)
class Loud(Note):
    """A kind of :class:`Note` with no performer of its own."""


@dataclass
class Log:
    """A real log, its live state, the interpreter over it, and what each performed effect saw."""

    db: Path
    store: AsyncEventStore
    live: LiveState
    it: Interpreter
    clock: FakeClock = field(default_factory=FakeClock)
    seen: list[tuple[str, bool]] = field(default_factory=list)
    """Per effect performed: its text, and whether ``model_configured(pinned)`` was folded from the log then."""

    async def types(self) -> list[str]:
        return [r.type for r in await self.store.read(EventFilter())]

    def note(self, effect: Note) -> None:
        self.seen.append((effect.text, self.live.state.models["a"].config.pinned))


@asynccontextmanager
async def a_log(db: Path) -> AsyncIterator[Log]:
    """A migrated SQLite log at ``db`` with model ``a`` discovered, its live state running."""
    upgrade(db)
    store = AsyncEventStore(db, source={"kind": "router"}, synchronous="NORMAL")
    live = LiveState(store)
    await live.start()
    log = Log(db, store, live, Interpreter(live))
    log.it.register(Note, log.note)
    files = ({"path": "/m/a.gguf", "size": 1},)
    try:
        await live.record(
            [NewEvent(ev.ModelDiscovered(source="models_dir", path="/m/a.gguf", files=files, size=1), "a")]
        )
        yield log
    finally:
        await log.it.close()
        await live.stop()
        await store.close()


def _pin(text: str = "pinned") -> Callable[[RouterState], Decision[str]]:
    """A decision about model ``a``: one event, then one effect."""
    return lambda _state: Decision(text, (Append(ev.ModelConfigured(pinned=True), "a"),), (Note(text),))


async def test_a_decisions_events_are_in_the_log_before_its_effects_run(tmp_path: Path) -> None:
    async with a_log(tmp_path / "log.db") as log:
        applied = await log.it.apply(_pin())
        assert await applied.settled() == "pinned"
        assert log.seen == [("pinned", True)]
        assert applied.state.models["a"].config.pinned, "the state after the decision's events"


async def test_a_decision_that_changes_nothing_performs_without_appending(tmp_path: Path) -> None:
    async with a_log(tmp_path / "log.db") as log:
        applied = await log.it.apply(lambda _s: Decision("same", effects=(Note("only"),)))
        await applied.settled()
        assert log.seen == [("only", False)] and await log.types() == ["model_discovered"]


async def test_a_refused_decision_appends_and_performs_nothing(tmp_path: Path) -> None:
    async with a_log(tmp_path / "log.db") as log:

        def refuse(_state: RouterState) -> Decision[None]:
            raise CommandRejected("conflict", "no")

        with pytest.raises(CommandRejected):
            await log.it.apply(refuse)
        assert log.seen == [] and await log.types() == ["model_discovered"]


async def test_an_append_that_conflicts_with_another_writer_is_decided_again_and_performed_once(
    tmp_path: Path,
) -> None:
    async with a_log(tmp_path / "log.db") as log:
        worker = open_writer(log.db, source={"kind": "inference"})
        seen_at: list[int] = []

        def decide(state: RouterState) -> Decision[str]:
            seen_at.append(state.position)
            if len(seen_at) == 1:  # a worker writes about the same model meanwhile
                worker.append([NewEvent(ev.ModelConfigured(hidden=True), model="a")])
            return _pin(f"try {len(seen_at)}")(state)

        try:
            applied = await log.it.apply(decide)
        finally:
            worker.close()
        await applied.settled()
        assert len(seen_at) == 2 and seen_at[1] > seen_at[0], "decided again over the newer state"
        assert await log.types() == ["model_discovered", "model_configured", "model_configured"]
        assert log.seen == [("try 2", True)], "the first decision did not land: not performed"
        assert applied.answer == "try 2" and applied.state.position == seen_at[1] + 1, "after the worker's event"


async def test_while_the_tail_is_down_a_decision_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    async with a_log(tmp_path / "log.db") as log:
        log.live.retry_base = 30.0  # the tail stays down while the test looks

        async def kill_tail() -> None:
            assert log.live.connection is not None
            raw = await log.live.connection.get_raw_connection()
            await raw.driver_connection.close()

        await kill_tail()
        await eventually_async(lambda: not log.live.up, "the tail to notice", timeout=10)
        with pytest.raises(StateUnavailable):
            await log.it.apply(_pin())
        with pytest.raises(StateUnavailable):
            await log.it.record([Append(ev.ModelConfigured(pinned=True), "a")])
        assert log.seen == [] and await log.types() == ["model_discovered"]
        # What nothing reads back is still written (the shutdown's router_stopped).
        await log.it.record_unread([Append(ev.RouterStopped(pid=1, reason="shutdown"))])
        assert await log.types() == ["model_discovered", "router_stopped"]


async def test_record_later_appends_off_the_callers_path(tmp_path: Path) -> None:
    async with a_log(tmp_path / "log.db") as log:
        done = ev.RequestCompleted(instance_id="i1", route="/v1/chat/completions", status_code=200, duration_ms=1.0)
        assert log.it.record_later([Append(done, "a")]) is None  # nothing to await
        assert len(log.it.background) == 1
        (task,) = log.it.background
        await task
        assert await log.types() == ["model_discovered", "request_completed"]
        assert log.it.background == set(), "a finished record leaves nothing behind"


async def test_close_cancels_the_effects_still_running(tmp_path: Path) -> None:
    async with a_log(tmp_path / "log.db") as log:
        started, ended = asyncio.Event(), []

        async def forever(_effect: Loud) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                ended.append("cancelled")
                raise

        log.it.register(Loud, forever)
        applied = await log.it.apply(lambda _s: Decision(None, effects=(Loud("x"),)))
        await started.wait()
        await log.it.close()
        assert ended == ["cancelled"] and all(t.cancelled() for t in applied.tasks)
        assert log.it.background == set()


async def test_an_effect_kind_without_a_performer_of_its_own_goes_to_its_bases(tmp_path: Path) -> None:
    async with a_log(tmp_path / "log.db") as log:
        await (await log.it.apply(lambda _s: Decision(None, effects=(Loud("base"),)))).settled()
        assert log.seen == [("base", False)]

        class Stray(Effect):
            pass

        with pytest.raises(LookupError, match="no performer for Stray"):
            log.it.perform([Stray()])


# --- apply_durably on a log whose disk is full -------------------------------------------------


@pytest.fixture
def full_disk_log(tmp_path: Path) -> AsyncIterator[Path]:
    """A log on a small disk of its own (skipped, saying why, where mounting is refused)."""
    for disk in mounted(16 << 20):
        yield disk.root / "log.db"


async def _durably(
    log: Log,
    decide: Callable[[RouterState], Decision[str]],
    give_up: Callable[[], bool],
    sleep: Callable[[float], Awaitable[None]],
) -> str:
    applied = await log.it.apply_durably(decide, asyncio.Lock(), give_up, sleep=sleep)
    return await applied.settled()


async def test_apply_durably_retries_a_full_disk_backing_off_then_lands_and_performs_once(
    full_disk_log: Path,
) -> None:
    from devtools.small_disk import SmallDisk, fill_log

    async with a_log(full_disk_log) as log:
        disk = SmallDisk(full_disk_log.parent)
        fill_log(disk, full_disk_log)
        lock, tries = asyncio.Lock(), []

        def decide(state: RouterState) -> Decision[str]:
            tries.append(state.position)
            return _pin("landed")(state)

        async def sleep(seconds: float) -> None:
            assert not lock.locked(), "the lock is let go between tries"
            await log.clock.sleep(seconds)
            if len(log.clock.slept) == 3:
                disk.free()  # space comes back

        applied = await log.it.apply_durably(decide, lock, give_up=lambda: False, sleep=sleep)
        assert await applied.settled() == "landed"
        assert log.clock.slept == [FULL_RETRY_FIRST_S, 2 * FULL_RETRY_FIRST_S, 4 * FULL_RETRY_FIRST_S]
        assert len(tries) == 4, "decided again on each try"
        assert log.seen == [("landed", True)], "performed once, after its event landed"


async def test_apply_durably_gives_up_at_a_shutdown_and_performs_nothing(full_disk_log: Path) -> None:
    from devtools.small_disk import SmallDisk, fill_log

    async with a_log(full_disk_log) as log:
        disk = SmallDisk(full_disk_log.parent)
        fill_log(disk, full_disk_log)
        with pytest.raises(LogDiskFull):
            await _durably(log, _pin(), give_up=lambda: True, sleep=log.clock.sleep)
        assert log.clock.slept == [] and log.seen == []
        disk.free()
