"""A fake clock and a fake spawner: the supervisors' outside world, in milliseconds.

The supervisors run for real (real SQLite log, real LiveState tail, real
decisions); only the processes and the time are fake, so a test can play a
worker (append its events, exit with a code) and move the clock.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from service.core import events as ev
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent
from service.event_store.live_state import LiveState
from service.recovery.migrate import upgrade
from service.settings import Settings
from service.supervision.child_process import ExitStatus
from service.supervision.instances import InstanceSupervisor
from service.supervision.surroundings import Probe, Surroundings
from tests.eventually import eventually_async


class FakeClock:
    def __init__(self) -> None:
        self.wall = datetime.now(UTC)
        self.mono = 1000.0
        self.slept: list[float] = []  # every sleep asked for (llama.cpp's fake timing), in order

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


@dataclass
class FakeChild:
    """A worker that does nothing unless told: exits on SIGKILL, and on SIGTERM or
    a ``stop`` line when ``obeys`` is set."""

    pid: int
    argv: Sequence[str]
    obeys: bool = True
    started_at: float | None = None
    lines: list[str] = field(default_factory=list)
    signals: list[int] = field(default_factory=list)
    _exit: asyncio.Future[ExitStatus] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def instance_id(self) -> str:
        return self.argv[list(self.argv).index("--instance-id") + 1]

    def exit(self, code: int | None = 0, sig: int | None = None) -> None:
        if not self._exit.done():
            self._exit.set_result(ExitStatus(exit_code=code, signal=sig))

    @property
    def exited(self) -> bool:
        return self._exit.done()

    async def wait(self) -> ExitStatus:
        return await asyncio.shield(self._exit)

    def send_line(self, line: str) -> None:
        self.lines.append(line)
        if self.obeys and line.startswith("stop"):
            self.exit(0)

    def close_stdin(self) -> None:
        self.lines.append("<eof>")

    def signal_group(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == signal.SIGKILL or (sig == signal.SIGTERM and self.obeys):
            self.exit(None, sig)

    def stderr_tail(self) -> str:
        return "fake stderr"


class FakeSpawner:
    def __init__(self) -> None:
        self.children: list[FakeChild] = []
        self.fail_with: OSError | None = None
        self.obeys = True
        self._pids = itertools.count(1000)

    async def __call__(self, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None) -> FakeChild:
        await asyncio.sleep(0)
        if self.fail_with is not None:
            raise self.fail_with
        child = FakeChild(pid=next(self._pids), argv=argv, obeys=self.obeys)
        self.children.append(child)
        return child

    def live(self) -> list[FakeChild]:
        return [c for c in self.children if not c.exited]


class FakeHeartbeat:
    """A worker's heartbeat: answers ``steps`` while ``alive``, else nothing (as a stopped process)."""

    def __init__(self) -> None:
        self.alive = True
        self.steps = 0
        self.asked = 0

    async def __call__(self, endpoint: str, timeout: float) -> Mapping[str, Any] | None:
        self.asked += 1
        return {"steps": self.steps, "step_s": None} if self.alive else None


@dataclass
class Rig:
    """A supervisor over a real log with fake processes and a fake clock."""

    sup: InstanceSupervisor
    live: LiveState
    clock: FakeClock
    spawner: FakeSpawner

    @property
    def state(self):
        return self.live.state

    async def worker(self, model: str, *events: ev.Event) -> None:
        """Append events as the model's worker would."""
        await self.live.record([NewEvent(e, model=model) for e in events])

    async def ready(self, model: str) -> FakeChild:
        """Play the worker of ``model``'s current instance up to ready."""
        child = await self.child_of(model)
        iid = child.instance_id
        await self.worker(
            model,
            ev.InstanceLoading(instance_id=iid, pid=child.pid, endpoint=f"http://127.0.0.1:{child.pid}"),
            ev.InstanceReady(
                instance_id=iid,
                pid=child.pid,
                endpoint=f"http://127.0.0.1:{child.pid}",
                load_ms=1.0,
                n_ctx=4096,
                n_params=1000,
                file_size=1,
                architecture="llama",
            ),
        )
        return child

    async def child_of(self, model: str, timeout: float = 5.0) -> FakeChild:
        """The live fake worker of ``model``'s current instance, once spawned."""

        def found() -> FakeChild | None:
            inst = self.state.models[model].instance
            for child in self.spawner.live():
                if inst is not None and child.instance_id == inst.instance_id:
                    return child
            return None

        await until(lambda: found() is not None, timeout, f"a worker for {model}")
        child = found()
        assert child is not None
        return child

    def types(self, model: str | None = None) -> list[str]:
        return [t for t, m in self.log if model is None or m == model]

    log: list[tuple[str, str | None]] = field(default_factory=list)


async def until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Wait for ``predicate`` (a state the code under test reaches on its own)."""
    await eventually_async(predicate, what, timeout=timeout)


@asynccontextmanager
async def rig(
    tmp_path: Path,
    models: Sequence[str] = ("a", "b", "c"),
    files: Mapping[str, Path] | None = None,
    heartbeat: Probe | None = None,
    **settings: object,
) -> AsyncIterator[Rig]:
    """Models on disk (``model_discovered``), a supervisor, its run loop. A model named in ``files`` is that
    real file (its header is read before its first placement); the others are paths that do not exist."""
    db = tmp_path / "log.db"
    upgrade(db)
    store = AsyncEventStore(db, source={"kind": "router"}, synchronous="NORMAL")
    live = LiveState(store)
    await live.start()
    clock, spawner = FakeClock(), FakeSpawner()
    ids = itertools.count(1)
    ports = itertools.count(20000)
    values: dict[str, object] = {
        "stop_timeout": 0.05,
        "queue_timeout": 30,
        "load_timeout": 60,
        "hang_timeout": 0,
        "cache_disk_max": 0,  # no prompt cache saved: a stop's timeout is the one given (issue 35's floor off)
        **settings,
    }
    config = Settings(home=tmp_path, **values)  # type: ignore[arg-type]  # test overrides
    sup = InstanceSupervisor(
        config,
        live,
        Surroundings(
            clock=clock,
            spawn=spawner,
            free_port=lambda: next(ports),
            new_id=lambda: f"i{next(ids)}",
            jitter=lambda: 0.0,
            heartbeat=heartbeat,
        ),
    )
    the_rig = Rig(sup, live, clock, spawner)
    live.add_listener(lambda r, _s: the_rig.log.append((r.type, r.model)))
    paths = {m: str((files or {}).get(m, f"/m/{m}.gguf")) for m in models}
    sizes = {m: Path(paths[m]).stat().st_size if m in (files or {}) else 1 for m in models}
    await live.record(
        [
            NewEvent(
                ev.ModelDiscovered(
                    source="models_dir", path=paths[m], files=({"path": paths[m], "size": sizes[m]},), size=sizes[m]
                ),
                model=m,
            )
            for m in models
        ]
    )
    runner = asyncio.create_task(sup.run())
    try:
        yield the_rig
    finally:
        await sup.shutdown()
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await live.stop()
        await store.close()
