"""A model's saved prompt cache, seen from outside (issue 35): ``GET /models``' ``prompt_cache``,
``GET /models/{id}/history`` (and ``modelrouter history``), ``/metrics``, ``modelrouter verify``, and the total budget applied when a
real worker stops. A real service; the saves and restores are appended to its real SQLite log as its
workers append them (the worker's own part is tested in tests/e2e/test_prompt_cache_reasons.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core import events as ev
from service.core.prompt_cache import DIR_NAME, file_path
from service.event_store.codec import NewEvent
from service.event_store.sync_store import SyncEventStore
from service.recovery.verify import main as verify_main
from service.settings import Settings
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(240)
TINY, OTHER = "tiny", "other"


def append(svc: ServiceProcess, *events: tuple[ev.Event, str]) -> None:
    """``events`` written into the service's log by another process, as a worker writes them."""
    store = SyncEventStore(Settings(home=svc.home).db_path, source={"kind": "inference_worker"})
    try:
        store.append([NewEvent(event, model) for event, model in events])
    finally:
        store.close()


def saved(svc: ServiceProcess, model: str, file: str, size: int, tokens: int = 4000) -> Path:
    """A saved file of ``size`` bytes in ``model``'s directory, and its ``prompt_cache_saved``."""
    path = Path(file_path(svc.home / DIR_NAME, model, file))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"k" * size)
    event = ev.PromptCacheSaved(
        instance_id=f"{model}-old", file=file, tokens=tokens, bytes=size, prefix_sha256="p" * 64, model_sha256=""
    )
    append(svc, (event, model))
    return path


def entry(svc: ServiceProcess, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        m for m in httpx.get(f"{svc.url}/models", timeout=10).json()["data"] if m["id"] == name
    )
    return found


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[ServiceProcess]:
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_gguf(models / f"{TINY}.gguf", seed=1)
    write_tiny_gguf(models / f"{OTHER}.gguf", seed=2)
    args = ["--models-dir", str(models), "--cache-disk-total", "1000", "--metrics"]
    with ServiceProcess(tmp_path / "home", env={"MODELROUTER_HANG_TIMEOUT": "0"}, args=args) as service:
        yield service


def test_saves_and_restores_are_listed_counted_and_verified(svc: ServiceProcess) -> None:
    kept = saved(svc, TINY, "entry-1.bin", 300, tokens=4000)
    append(svc, (ev.PromptCacheRestored(instance_id="tiny-new", file="entry-1.bin", tokens=4000, bytes=300), TINY))

    def restored() -> dict[str, Any] | None:
        cache: dict[str, Any] | None = entry(svc, TINY).get("prompt_cache")
        return cache if cache and cache["files"][0]["restored_at"] else None

    cache = eventually(restored, "the saved cache listed, restored", timeout=30)
    assert (cache["bytes"], cache["tokens"], [f["file"] for f in cache["files"]]) == (300, 4000, ["entry-1.bin"])
    assert cache["files"][0]["saved_at"] and cache["files"][0]["restored_at"]
    assert "prompt_cache" not in entry(svc, OTHER), "absent when none"

    history = httpx.get(f"{svc.url}/models/{TINY}/history", timeout=10).json()["prompt_cache"]
    assert [(h["action"], h["file"], h["tokens"]) for h in history] == [
        ("saved", "entry-1.bin", 4000),
        ("restored", "entry-1.bin", 4000),
    ]

    env = {**os.environ, "MODELROUTER_URL": svc.url, "COLUMNS": "200"}
    shown = subprocess.run(
        [sys.executable, "-m", "service.cli", "history", TINY], capture_output=True, text=True, env=env, timeout=60
    )
    assert shown.returncode == 0 and "prompt cache on disk" in shown.stdout, shown.stderr
    assert "entry-1.bin" in shown.stdout and "restored" in shown.stdout

    metrics = httpx.get(f"{svc.url}/metrics", timeout=10).text
    assert f'modelrouter_prompt_cache_restored_tokens_total{{model="{TINY}"}} 4000.0' in metrics
    assert f'modelrouter_prompt_cache_bytes{{model="{TINY}"}} 300.0' in metrics

    assert verify_main(["--home", str(svc.home), "--json"]) == 0
    kept.unlink()
    assert verify_main(["--home", str(svc.home), "--json"]) == 1, "a file the log counts on is missing"


def test_verify_names_the_missing_file(svc: ServiceProcess, capsys: pytest.CaptureFixture[str]) -> None:
    saved(svc, TINY, "entry-1.bin", 300).unlink()
    eventually(lambda: entry(svc, TINY).get("prompt_cache"), "the save folded", timeout=30)
    verify_main(["--home", str(svc.home), "--json"])
    check = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "prompt_cache")
    assert check["status"] == "FAIL" and "entry-1.bin" in check["items"][0]


def test_when_a_real_worker_stops_the_total_budget_deletes_the_least_recently_used(svc: ServiceProcess) -> None:
    oldest = saved(svc, OTHER, "old.bin", 600)
    newer = saved(svc, TINY, "new.bin", 300)
    eventually(lambda: entry(svc, TINY).get("prompt_cache"), "the saves folded", timeout=30)
    assert oldest.exists(), "nothing is deleted before a worker stops"
    httpx.post(f"{svc.url}/models/load", json={"model": TINY}, timeout=30).raise_for_status()
    eventually(lambda: entry(svc, TINY)["status"]["value"] == "loaded", "tiny loaded", timeout=120)
    saved(svc, TINY, "latest.bin", 300)  # 1200 bytes in all: over the 1000 of --cache-disk-total
    httpx.post(f"{svc.url}/models/unload", json={"model": TINY}, timeout=60).raise_for_status()
    eventually(lambda: not oldest.exists(), "the oldest file deleted", timeout=60)
    assert newer.exists()
    eventually(lambda: "prompt_cache" not in entry(svc, OTHER), "its discard folded", timeout=30)
    history = httpx.get(f"{svc.url}/models/{OTHER}/history", timeout=10).json()["prompt_cache"]
    assert [(h["action"], h["reason"], h["bytes"]) for h in history][-1] == ("discarded", "budget", 600)
