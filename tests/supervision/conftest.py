"""Fixtures: the real service over a models dir of tiny real GGUF files."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_random_bytes, write_text_as_gguf, write_tiny_gguf, write_truncated_gguf
from tests.eventually import eventually


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    write_tiny_gguf(root / "tiny-a.gguf", seed=1)
    write_tiny_gguf(root / "tiny-b.gguf", seed=2)
    write_truncated_gguf(root / "broken-truncated.gguf")
    write_random_bytes(root / "broken-random.gguf")
    write_text_as_gguf(root / "broken-text.gguf")
    return root


StartService = Callable[..., ServiceProcess]


@pytest.fixture
def start_service(tmp_path: Path, models_dir: Path) -> Iterator[StartService]:
    started: list[ServiceProcess] = []

    def start(**env: Any) -> ServiceProcess:
        variables = {"MODELROUTER_MODELS_DIR": str(models_dir), **{k.upper(): str(v) for k, v in env.items()}}
        proc = ServiceProcess(tmp_path / f"home{len(started)}", env=variables)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


def events(svc: ServiceProcess, **params: Any) -> list[dict[str, Any]]:
    """Every matching event (follows next_after paging)."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = httpx.get(f"{svc.url}/events", params={"limit": 1000, "after": after, **params}, timeout=10).json()
        found += page["events"]
        if page["next_after"] is None:
            return found
        after = page["next_after"]


def wait_for_event(svc: ServiceProcess, type_: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
    """The latest ``type_`` event, waiting for the first one (a signal, not a sleep)."""
    found = eventually(lambda: events(svc, type=type_, **params), f"a {type_} event", timeout=timeout, interval=0.05)
    return found[-1]


def model_entry(svc: ServiceProcess, name: str) -> dict[str, Any]:
    data = httpx.get(f"{svc.url}/models", timeout=10).json()["data"]
    return next(m for m in data if m["id"] == name)


def inference_children(svc: ServiceProcess) -> list[psutil.Process]:
    """Live inference worker processes started by this service: its direct children
    (a worker's own short-lived helpers, forked before they exec, show the worker's
    command line too)."""
    try:
        children = psutil.Process(svc.pid).children()
    except psutil.NoSuchProcess:
        return []
    result = []
    for child in children:
        try:
            if "workers.inference" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                result.append(child)
        except psutil.NoSuchProcess:
            continue
    return result


def still_running(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Processes still running after ``timeout`` (a zombie has exited: only its
    reaping is left, to whoever inherited it)."""
    deadline = time.monotonic() + timeout
    while True:
        running = []
        for proc in procs:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    running.append(proc)
            except psutil.NoSuchProcess:
                continue
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.02)
