"""Eviction by memory, not only by count; ``pin = true``; 507 for a model that can never fit.

One real service (no model count limit) whose models may use 1.5 tiny models'
worth of memory (``MODELROUTER_MEMORY_BYTES``, margin 0): a second model
evicts the first, a model too big for the whole budget and one that cannot fit
beside a pinned model are refused at once with 507, and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core.memory import estimate
from service.core.node_state import ModelShape
from service.llamacpp.gguf_shape import measure
from tests.eventually import eventually
from tests.service_probes import events, model_entry, wait_for_event

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
HUGE_CTX = 100_000_000  # a KV pool of 100M cells: far more than the budget


def _need(path: Path, params: dict[str, Any]) -> int:
    m = measure(path, path.stat().st_size)
    shape = ModelShape(**{f: getattr(m, f) for f in ModelShape.__dataclass_fields__})
    return estimate(shape, params).total


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceProcess, int]]:
    root = tmp_path_factory.mktemp("memory")
    models = root / "models"
    for i, name in enumerate(("tiny-a", "tiny-b", "tiny-huge", "tiny-pinned")):
        write_tiny_gguf(models / f"{name}.gguf", seed=i)
    presets = root / "presets.ini"
    presets.write_text(f"[tiny-huge]\nctx-size = {HUGE_CTX}\n\n[tiny-pinned]\npin = true\n")
    need = max(_need(models / f"{n}.gguf", {}) for n in ("tiny-a", "tiny-b", "tiny-pinned"))
    budget = need * 3 // 2
    env = {
        "MODELROUTER_MODELS_DIR": str(models),
        "MODELROUTER_PRESETS": str(presets),
        "MODELROUTER_MODELS_MAX": "0",
        "MODELROUTER_MEMORY_BYTES": str(budget),
        "MODELROUTER_MODELS_MEMORY_MARGIN": "0",
    }
    proc = ServiceProcess(root / "home", env=env).start()
    try:
        yield proc, budget
    finally:
        proc.stop()


def _chat(svc: ServiceProcess, model: str) -> httpx.Response:
    return httpx.post(f"{svc.url}/v1/chat/completions", json={"model": model, **CHAT}, timeout=60)


def _status(svc: ServiceProcess, model: str) -> str:
    return str(model_entry(svc, model)["status"]["value"])


@pytest.mark.timeout(180)
def test_memory_decides_eviction_pins_stay_and_what_cannot_fit_is_refused_with_507(
    svc: tuple[ServiceProcess, int],
) -> None:
    proc, budget = svc
    assert _chat(proc, "tiny-a").status_code == 200
    entry = model_entry(proc, "tiny-a")
    assert entry["memory"]["total_bytes"] == _need(Path(entry["path"]), {}), "GET /models shows the estimated need"
    assert events(proc, type="model_measured", model="tiny-a")[0]["data"]["n_layer"] == 2

    # No count limit, but two tiny models do not fit in 1.5 tiny models of memory: the idle one is evicted.
    assert _chat(proc, "tiny-b").status_code == 200
    stop = wait_for_event(proc, "instance_stop_requested", model="tiny-a")
    assert stop["data"]["reason"] == "evicted"
    wait_for_event(proc, "instance_stopped", model="tiny-a")

    # Too big for the whole budget: refused at once, naming the need and the free memory; nothing changes.
    refused = _chat(proc, "tiny-huge")
    assert refused.status_code == 507, refused.text
    body = refused.json()
    huge = _need(Path(model_entry(proc, "tiny-huge")["path"]), {"n_ctx": HUGE_CTX})
    assert body["type"].endswith("insufficient_memory") and body["need_bytes"] == huge > budget
    assert body["memory_bytes"] == budget and str(huge) in body["detail"] and body["error"]["code"] == 507
    assert events(proc, type="instance_requested", model="tiny-huge") == []
    assert _status(proc, "tiny-b") == "loaded"

    # A pinned model evicts the idle one, then nothing can fit beside it: 507 at once, the pin stays loaded.
    loaded = httpx.post(f"{proc.url}/models/load", json={"model": "tiny-pinned"}, timeout=60)
    assert loaded.status_code == 200 and model_entry(proc, "tiny-pinned")["pinned"] is True
    wait_for_event(proc, "instance_ready", model="tiny-pinned")
    assert wait_for_event(proc, "instance_stop_requested", model="tiny-b")["data"]["reason"] == "evicted"
    beside = httpx.post(f"{proc.url}/models/load", json={"model": "tiny-a"}, timeout=60)
    assert beside.status_code == 507 and "pinned" in beside.json()["detail"]
    assert _chat(proc, "tiny-a").status_code == 507
    # The ready event is in the log before the service's fold has read it (a worker appends it).
    eventually(lambda: _status(proc, "tiny-pinned") == "loaded", "tiny-pinned loaded", interval=0.1)
    assert [e["data"]["reason"] for e in events(proc, type="instance_stop_requested", model="tiny-pinned")] == []
