"""Reusable fixtures: the fake Hub server process and download-worker processes.

Import the fixtures into a test module (``from tests.conftest_hub import hub, hub_server``)
or register this module globally with ``pytest_plugins = ["tests.conftest_hub"]``
in ``tests/conftest.py``.

One hub server per session (starting one costs ~0.3 s); the function-scoped
``hub`` fixture resets its faults and counters, and every test uses its own
repo names, so tests stay independent.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.hub_server import HubServer
from service.core.contracts import DownloadSpec
from tests.eventually import eventually
from tests.worker_proc import WorkerUnderTest

REPO_ROOT = Path(__file__).resolve().parents[1]
_counter = itertools.count()


@pytest.fixture(scope="session")
def hub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    with HubServer.start(tmp_path_factory.mktemp("hub")) as server:
        yield server


@pytest.fixture
def hub(hub_server: HubServer) -> Iterator[HubServer]:
    """The session hub with no faults and zeroed counters."""
    hub_server.reset()
    yield hub_server
    hub_server.reset()  # also releases responses a test left stalled


def unique_repo(prefix: str = "repo") -> str:
    """A repo id no other test uses (the hub root is shared by the session)."""
    return f"tester/{prefix}-{os.getpid()}-{next(_counter)}-GGUF"


@dataclass
class DownloadProc(WorkerUnderTest):
    """A running ``python -m workers.download`` writing JSONL events to a file."""

    job_id: str
    _start: float = field(default_factory=time.monotonic)

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
        def died() -> str | None:
            code = self.proc.poll()
            return None if code is None else f"worker exited {code}: {self.types()}\n{self.stderr()}"

        eventually(predicate, what, timeout=timeout, interval=0.005, abort=died)

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stderr(self) -> str:
        return self.stderr_tail()


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def download_command(
    spec: DownloadSpec | dict[str, Any] | str, cache_dir: Path, events: Path, job_id: str, *extra: str
) -> list[str]:
    spec_arg = spec if isinstance(spec, str) else spec.to_argv() if isinstance(spec, DownloadSpec) else json.dumps(spec)
    return [
        sys.executable,
        "-m",
        "workers.download",
        "--job-id",
        job_id,
        "--model",
        "test/model",
        "--cache-dir",
        str(cache_dir),
        "--spec",
        spec_arg,
        "--events",
        str(events),
        "--retry-base",
        "0.05",
        "--retry-cap",
        "0.5",
        *extra,
    ]


@pytest.fixture
def spawn_download(tmp_path: Path) -> Iterator[Callable[..., DownloadProc]]:
    """Start download workers (stdin=/dev/null, as the service does); all killed at teardown.

    ``spawn(spec, cache_dir, *extra_args, env=None, preexec_fn=None)``
    """
    started: list[DownloadProc] = []

    def spawn(
        spec: dict[str, Any] | str,
        cache_dir: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ) -> DownloadProc:
        job_id = f"job-{len(started)}"
        events, err_path = tmp_path / f"{job_id}.events.jsonl", tmp_path / f"{job_id}.stderr.log"
        with err_path.open("wb") as err:
            proc = subprocess.Popen(
                download_command(spec, cache_dir, events, job_id, *extra),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=REPO_ROOT,
                env=env or worker_env(),
                preexec_fn=preexec_fn,
            )
        w = DownloadProc(proc, events, err_path, job_id)
        started.append(w)
        return w

    yield spawn
    for w in started:
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait(timeout=10)
