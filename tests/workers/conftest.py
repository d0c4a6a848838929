"""Fixtures for worker tests: tiny real GGUF files and real worker subprocesses."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.worker_proc import WorkerUnderTest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_embedding_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-embed.gguf", embedding=True)


@dataclass
class WorkerProc(WorkerUnderTest):
    """A running ``python -m workers.inference`` and its JSONL event file."""

    instance_id: str
    endpoint: str = ""

    def wait_ready(self, timeout: float = 120.0) -> str:
        ready = self.wait_event("instance_ready", timeout)
        self.endpoint = ready["endpoint"]
        return self.endpoint

    def wait_exit(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout=timeout)


def worker_command(
    model_path: Path | str, *, instance_id: str, events: Path, extra: list[str] | None = None
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "workers.inference",
        "--model-path",
        str(model_path),
        "--model-name",
        "tiny",
        "--instance-id",
        instance_id,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--n-threads",
        "1",
        "--events",
        str(events),
        *(extra or []),
    ]


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def worker_tools() -> SimpleNamespace:
    """Helpers for tests that launch workers their own way (e.g. under another parent)."""
    return SimpleNamespace(root=REPO_ROOT, command=worker_command, env=worker_env, WorkerProc=WorkerProc)


@pytest.fixture
def spawn_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProc]]:
    """Start workers with ``stdin=PIPE`` (as the service does); all killed at teardown."""
    started: list[WorkerProc] = []

    def spawn(
        model_path: Path | str, *extra: str, instance_id: str | None = None, env: dict[str, str] | None = None
    ) -> WorkerProc:
        iid = instance_id or f"inst-{len(started)}"
        events = tmp_path / f"{iid}.events.jsonl"
        stderr_path = tmp_path / f"{iid}.stderr.log"
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(
                worker_command(model_path, instance_id=iid, events=events, extra=list(extra)),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=REPO_ROOT,
                env={**worker_env(), **(env or {})},
            )
        w = WorkerProc(proc, events, stderr_path, iid)
        started.append(w)
        return w

    yield spawn
    for w in started:
        w.kill()
        if w.proc.stdin:
            w.proc.stdin.close()


@contextlib.contextmanager
def started_worker(tmp: Path, model: Path, instance_id: str, extra: list[str]) -> Iterator[WorkerProc]:
    """A ready worker for ``model`` (events and stderr under ``tmp``), killed on exit: for module fixtures."""
    events, stderr_path = tmp / "events.jsonl", tmp / "stderr.log"
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            worker_command(model, instance_id=instance_id, events=events, extra=extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=REPO_ROOT,
            env=worker_env(),
        )
    w = WorkerProc(proc, events, stderr_path, instance_id)
    try:
        w.wait_ready()
        yield w
    finally:
        w.kill()
        if proc.stdin:
            proc.stdin.close()


def load_failure(worker: WorkerProc) -> str:
    """A worker whose load fails: it exits with EXIT_LOAD_FAILED (3); its ``instance_load_failed`` event."""
    assert worker.wait_exit(120) == 3
    failed = worker.of_type("instance_load_failed")
    assert failed, worker.stderr_tail()
    return str(failed[0])


@pytest.fixture(scope="module")
def ready_worker(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[WorkerProc]:
    """One shared ready worker for the serving tests (spawning costs ~0.5 s)."""
    with started_worker(tmp_path_factory.mktemp("worker"), tiny_gguf, "shared", ["--seed", "7"]) as w:
        yield w
