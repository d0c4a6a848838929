"""What a supervisor needs from the outside world, injected so tests can fake it.

The decisions live in ``service/core``; a supervisor turns observations into
calls to them and performs the effects they imply. Everything here is one of
those effects or a source of facts: the clock, the process spawner, the port
allocator, the id source and the jitter of backoffs. Tests pass a fake clock
and a fake spawner and drive every transition in milliseconds.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from service.outside.world import SystemClock, new_instance_id, new_job_id
from service.supervision.child_process import ChildProcess, ExitStatus
from service.supervision.ports import free_port
from service.supervision.worker_keys import WorkerKeys
from service.supervision.worker_logs import WorkerLogs


class Child(Protocol):
    """A spawned worker as a supervisor sees it (``ChildProcess`` in production)."""

    pid: int
    started_at: float | None

    async def wait(self) -> ExitStatus: ...

    def send_line(self, line: str) -> None: ...

    def close_stdin(self) -> None: ...

    def signal_group(self, sig: int) -> None: ...

    def stderr_tail(self) -> str: ...


class Spawner(Protocol):
    async def __call__(self, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None) -> Child: ...


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall-clock time (UTC): compared with ``recorded_at`` of events."""
        ...

    def monotonic(self) -> float:
        """Seconds for timeouts that must not jump with the wall clock."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (llama.cpp's fake timing); a fake clock may return at once."""
        ...


Probe = Callable[[str, float], Awaitable[Mapping[str, Any] | None]]
"""Asks the worker at an endpoint for its heartbeat within a timeout (seconds): its answer, or None.
Any: the worker's JSON object (``steps``, ``step_s``...), read by :mod:`service.supervision.heartbeats`."""


async def spawn_child(argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None) -> Child:
    return await ChildProcess.spawn(argv, name=name, env=env)


@dataclass(frozen=True, slots=True)
class LoggedSpawn:
    """The real spawner with every line of each worker to its log (:mod:`service.supervision.worker_logs`).
    The worker's ``name`` is its identity: ``inference:MODEL:INSTANCE`` keeps ``instance-INSTANCE.log``,
    ``download:JOB`` keeps ``download-JOB.log``."""

    logs: WorkerLogs

    async def __call__(self, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None) -> Child:
        kind, _, rest = name.partition(":")
        log = self.logs.stream(name, "instance" if kind == "inference" else kind, rest.rsplit(":", 1)[-1])
        return await ChildProcess.spawn(argv, name=name, env=env, log=log)


@dataclass(frozen=True, slots=True)
class Surroundings:
    """The injected outside world of a supervisor; the defaults are the real one."""

    clock: Clock = field(default_factory=SystemClock)
    spawn: Spawner = spawn_child
    free_port: Callable[[], int] = free_port
    new_id: Callable[[], str] = new_instance_id
    new_job_id: Callable[[], str] = new_job_id
    jitter: Callable[[], float] = random.random
    heartbeat: Probe | None = None  # None: GET /engine/heartbeat over HTTP (service.supervision.heartbeats)
    worker_keys: WorkerKeys = field(default_factory=WorkerKeys)  # each worker's secret, sent by the HTTP clients
