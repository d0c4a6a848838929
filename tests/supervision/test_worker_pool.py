"""The worker processes of one supervisor by key (:mod:`service.supervision.worker_pool`), with real
processes: a stop escalates from a stdin line to SIGTERM to SIGKILL, each exit is handed on once after
it is reaped, and a key holds its place until then."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Mapping, Sequence

import pytest

from service.core.processes import ProcessExit
from service.supervision.surroundings import Child, spawn_child
from service.supervision.worker_pool import WorkerPool
from tests.eventually import eventually_async

WAIT = 60.0  # seconds: a python start on two busy cores
# Reads stdin: exits 0 on "stop", and on EOF with 5.
OBEYS = (
    "import sys\n"
    "print('ready', file=sys.stderr, flush=True)\n"
    "for line in sys.stdin:\n"
    "    if line.strip() == 'stop':\n"
    "        raise SystemExit(0)\n"
    "raise SystemExit(5)\n"
)
IGNORES_LINES = "import sys, time\nprint('ready', file=sys.stderr, flush=True)\ntime.sleep(120)\n"
IGNORES_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', file=sys.stderr, flush=True)\n"
    "time.sleep(120)\n"
)


class Exits:
    """The pool's ``on_exit``: every exit handed on, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, ProcessExit]] = []

    async def __call__(self, key: str, exit_: ProcessExit) -> None:
        self.seen.append((key, exit_))


async def _started(pool: WorkerPool, key: str, code: str) -> None:
    child = await pool.spawn(key, [sys.executable, "-c", code], name=f"test:{key}")
    await eventually_async(lambda: "ready" in child.stderr_tail(), f"{key} ready", timeout=WAIT)


async def test_each_exit_is_handed_on_once_after_it_is_reaped_and_the_key_leaves_the_pool() -> None:
    exits = Exits()
    pool = WorkerPool(spawn_child, exits)
    child = await pool.spawn("a", [sys.executable, "-c", "raise SystemExit(4)"], name="test:a")
    assert "a" in pool and pool.child("a") is child
    await pool.reaped("a")
    assert [(key, e.exit_code, e.signal, e.forced) for key, e in exits.seen] == [("a", 4, None, False)]
    assert "a" not in pool and pool.active() == set() and await pool.settled("a") is None


async def test_a_stop_asks_on_stdin_first() -> None:
    exits = Exits()
    pool = WorkerPool(spawn_child, exits)
    await _started(pool, "a", OBEYS)
    assert await pool.stop("a", "stop", grace=WAIT, timeout=WAIT)
    assert [(e.exit_code, e.signal, e.forced) for _, e in exits.seen] == [(0, None, False)]


async def test_a_worker_that_ignores_the_line_gets_sigterm_after_the_grace() -> None:
    exits = Exits()
    pool = WorkerPool(spawn_child, exits)
    await _started(pool, "a", IGNORES_LINES)
    assert await pool.stop("a", "stop", grace=0.2, timeout=WAIT)
    assert [(e.exit_code, e.signal, e.forced) for _, e in exits.seen] == [(None, signal.SIGTERM, False)]


async def test_a_worker_that_ignores_sigterm_is_killed_and_its_exit_says_forced() -> None:
    exits = Exits()
    pool = WorkerPool(spawn_child, exits)
    await _started(pool, "a", IGNORES_SIGTERM)
    assert await pool.stop("a", "stop", grace=0.1, timeout=0.2)
    assert [(e.exit_code, e.signal, e.forced) for _, e in exits.seen] == [(None, signal.SIGKILL, True)]


async def test_a_stop_of_a_key_without_a_process_is_false() -> None:
    pool = WorkerPool(spawn_child, Exits())
    assert not await pool.stop("nobody", "stop", grace=0.1, timeout=0.1)


async def test_abandon_closes_stdin_and_waits_for_every_exit() -> None:
    exits = Exits()
    pool = WorkerPool(spawn_child, exits)
    await _started(pool, "a", OBEYS)
    await _started(pool, "b", IGNORES_SIGTERM)  # does not read stdin: killed when the grace ends
    assert await pool.abandon(["a", "b"], grace=1.0) == ["a", "b"]
    assert sorted((key, e.exit_code, e.signal, e.forced) for key, e in exits.seen) == [
        ("a", 5, None, False),
        ("b", None, signal.SIGKILL, True),
    ]
    assert pool.active() == set()


async def test_a_spawn_that_cannot_start_raises_and_leaves_no_key() -> None:
    pool = WorkerPool(spawn_child, Exits())
    with pytest.raises(OSError):
        await pool.spawn("a", ["/nonexistent/worker"], name="test:a")
    assert "a" not in pool and await pool.settled("a") is None


async def test_a_key_holds_its_place_while_its_spawn_is_under_way() -> None:
    """A slot is taken from the spawn on, not from its end: two planning passes cannot both fill it."""
    release = asyncio.Event()

    async def slow_spawn(argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None) -> Child:
        await release.wait()
        return await spawn_child(argv, name=name, env=env)

    exits = Exits()
    pool = WorkerPool(slow_spawn, exits)
    spawning = asyncio.create_task(pool.spawn("a", [sys.executable, "-c", "pass"], name="test:a"))
    await eventually_async(lambda: "a" in pool, "the spawn under way", timeout=WAIT)
    assert pool.active() == {"a"} and pool.child("a") is None
    release.set()
    child = await pool.settled("a")
    assert child is await spawning
    await pool.reaped("a")
    assert [key for key, _ in exits.seen] == ["a"]


async def test_close_all_stdin_and_wait_all_end_every_worker_that_reads_it() -> None:
    exits = Exits()
    pool = WorkerPool(spawn_child, exits)
    await _started(pool, "a", OBEYS)
    await _started(pool, "b", OBEYS)
    pool.close_all_stdin()
    assert await pool.wait_all(WAIT)
    assert sorted((key, e.exit_code) for key, e in exits.seen) == [("a", 5), ("b", 5)]
