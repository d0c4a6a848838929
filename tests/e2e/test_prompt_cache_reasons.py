"""Each planned unload saves the model's prompt cache, and the next load restores it (issue 35): through
the real service, its real workers and a tiny model, one test per reason (eviction, idle TTL,
``keep_alive: 0``, sleep, an unload request, a shutdown and restart).

These need the inference worker's part of issue 35 (saving at a graceful stop into
``--prompt-cache-dir``, restoring at load, appending ``prompt_cache_saved``/``_restored``); the
service's part is here: the flags, the directory, a stop that leaves the save its bound.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core.prompt_cache import DIR_NAME, model_dir_name
from tests.eventually import eventually
from tests.service_probes import events, model_entry, wait_for_event

pytestmark = pytest.mark.timeout(240)
TINY, OTHER = "tiny", "other"
PROMPT = list(range(5, 69))  # 64 token ids of the tiny vocabulary: a prefix worth keeping
Start = Callable[..., ServiceProcess]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_gguf(models / f"{TINY}.gguf", seed=1)
    write_tiny_gguf(models / f"{OTHER}.gguf", seed=2)
    started: list[ServiceProcess] = []

    def run(*args: str, presets: str | None = None) -> ServiceProcess:
        more = list(args)
        if presets is not None:
            (tmp_path / "presets.ini").write_text(presets)
            more += ["--presets", str(tmp_path / "presets.ini")]
        svc = ServiceProcess(tmp_path / "home", args=["--models-dir", str(models), *more])
        started.append(svc)
        return svc.start()

    yield run
    for svc in started:
        svc.stop()


def complete(svc: ServiceProcess, model: str = TINY) -> dict[str, Any]:
    body = {"model": model, "prompt": PROMPT, "n_predict": 4, "temperature": 0, "cache_prompt": True}
    answer = httpx.post(f"{svc.url}/completion", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def saved_then_restored(svc: ServiceProcess, unload: Callable[[], None], reason: str) -> None:
    """A first request fills the cache; ``unload`` stops the worker for ``reason``; its save is recorded
    and on disk; the same request loads the model again, restores the prefix and prefills only the rest,
    with the same greedy answer."""
    first = complete(svc)
    assert first["timings"]["prompt_n"] >= len(PROMPT) - 1
    instance = model_entry(svc, TINY)["status"]["instance"]["instance_id"]
    unload()
    stop = wait_for_event(svc, "instance_stop_requested", timeout=60, model=TINY)
    assert stop["data"]["reason"] == reason
    saved = wait_for_event(svc, "prompt_cache_saved", timeout=60, model=TINY)
    assert saved["data"]["instance_id"] == instance and saved["data"]["tokens"] >= len(PROMPT) - 1
    on_disk = svc.home / DIR_NAME / model_dir_name(TINY)
    assert any(p.stat().st_size == saved["data"]["bytes"] for p in on_disk.iterdir() if ".tmp-" not in p.name)
    again = complete(svc)
    restored = wait_for_event(svc, "prompt_cache_restored", timeout=60, model=TINY)
    assert restored["data"]["file"] == saved["data"]["file"]
    assert again["timings"]["prompt_n"] <= 2, "only the tokens after the restored prefix are prefilled"
    assert again["content"] == first["content"], "greedy output equals the fresh run's"


def test_an_eviction_saves_and_the_next_load_restores(start: Start) -> None:
    svc = start("--models-max", "1")
    saved_then_restored(svc, lambda: complete(svc, OTHER), "evicted")


def test_an_idle_ttl_saves_and_the_next_load_restores(start: Start) -> None:
    svc = start(presets=f"[{TINY}]\nttl = 1\n")
    saved_then_restored(svc, lambda: None, "idle")


def test_keep_alive_zero_saves_and_the_next_load_restores(start: Start) -> None:
    svc = start()

    def keep_alive_zero() -> None:
        httpx.post(f"{svc.url}/api/generate", json={"model": TINY, "keep_alive": 0}, timeout=60).raise_for_status()

    saved_then_restored(svc, keep_alive_zero, "keep_alive")


def test_sleep_saves_and_the_wake_restores(start: Start) -> None:
    svc = start("--sleep-idle-seconds", "2")
    saved_then_restored(svc, lambda: None, "sleep")


def test_an_unload_request_saves_and_the_next_load_restores(start: Start) -> None:
    svc = start()

    def unload() -> None:
        httpx.post(f"{svc.url}/models/unload", json={"model": TINY}, timeout=60).raise_for_status()

    saved_then_restored(svc, unload, "unload")


def test_a_shutdown_saves_and_the_next_service_restores(start: Start) -> None:
    svc = start()
    first = complete(svc)
    instance = model_entry(svc, TINY)["status"]["instance"]["instance_id"]
    assert svc.stop() in (0, -signal.SIGTERM)  # a graceful shutdown: it waits for the worker's save
    again = start()
    saves = [e for e in events(again, type="prompt_cache_saved", model=TINY) if e["data"]["instance_id"] == instance]
    assert saves, "the shutdown's stop saved before the service ended"
    answer = complete(again)
    eventually(lambda: events(again, type="prompt_cache_restored", model=TINY), "the restore", timeout=60)
    assert answer["timings"]["prompt_n"] <= 2 and answer["content"] == first["content"]
