"""Fixtures for worker tests: tiny real GGUF files and real worker subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from service.devtools.tiny_gguf import write_tiny_gguf
from workers._sink import read_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_embedding_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-embed.gguf", embedding=True)


@dataclass
class WorkerProc:
    """A running ``python -m workers.inference`` and its JSONL event file."""

    proc: subprocess.Popen[bytes]
    events_path: Path
    stderr_path: Path
    instance_id: str
    endpoint: str = ""
    _seen: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return read_jsonl(self.events_path)

    def types(self) -> list[str]:
        return [t for t, _ in self.events()]

    def wait_event(self, type: str, timeout: float = 20.0) -> dict[str, Any]:
        """Wait for the first event of ``type``; fail early if the process exits without it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, data in self.events():
                if t == type:
                    return data
            if self.proc.poll() is not None:
                for t, data in self.events():  # final read after exit
                    if t == type:
                        return data
                raise AssertionError(
                    f"worker exited ({self.proc.returncode}) without {type}; events={self.types()}\n"
                    f"stderr tail:\n{self.stderr_tail()}"
                )
            time.sleep(0.01)
        raise AssertionError(f"no {type} within {timeout}s; events={self.types()}\n{self.stderr_tail()}")

    def wait_ready(self, timeout: float = 30.0) -> str:
        ready = self.wait_event("instance_ready", timeout)
        self.endpoint = ready["endpoint"]
        return self.endpoint

    def wait_exit(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-n:]
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


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

    def spawn(model_path: Path | str, *extra: str, instance_id: str | None = None) -> WorkerProc:
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
                env=worker_env(),
            )
        w = WorkerProc(proc, events, stderr_path, iid)
        started.append(w)
        return w

    yield spawn
    for w in started:
        w.kill()
        if w.proc.stdin:
            w.proc.stdin.close()


@pytest.fixture(scope="module")
def ready_worker(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[WorkerProc]:
    """One shared ready worker for the serving tests (spawning costs ~0.5 s)."""
    tmp = tmp_path_factory.mktemp("worker")
    events, stderr_path = tmp / "events.jsonl", tmp / "stderr.log"
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            worker_command(tiny_gguf, instance_id="shared", events=events, extra=["--seed", "7"]),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=REPO_ROOT,
            env=worker_env(),
        )
    w = WorkerProc(proc, events, stderr_path, "shared")
    w.wait_ready()
    yield w
    w.kill()
    if proc.stdin:
        proc.stdin.close()
