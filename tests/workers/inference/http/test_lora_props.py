"""``--lora``/``--lora-scaled`` and ``/lora-adapters``, and ``POST /props``, on real workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_lora
from tests.workers.conftest import WorkerProc
from workers.inference.llama import LoraError, parse_specs


def _post(url: str, path: str, status: int = 200, body: Any = None) -> Any:
    r = httpx.post(url + path, json=body, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def _greedy(url: str) -> str:
    answer = _post(url, "/completion", body={"prompt": "hello there", "n_predict": 8, "temperature": 0})
    text: str = answer["content"]
    return text


@pytest.mark.timeout(120)
def test_lora_scales_change_the_output(spawn_worker: Any, tiny_gguf: Path, tmp_path: Path) -> None:
    """An adapter loaded at scale 0 leaves the base model's greedy text; at scale 1 (``POST
    /lora-adapters``) the text changes, and back at 0 (an adapter left out of the list) it returns.
    The cache computed under other scales is not reused."""
    lora = write_tiny_lora(tmp_path / "lora.gguf")
    base = spawn_worker(tiny_gguf)
    worker = spawn_worker(tiny_gguf, "--lora", str(lora), "--lora-init-without-apply")
    base_text = _greedy(base.wait_ready())
    url = worker.wait_ready()
    listed = httpx.get(url + "/lora-adapters", timeout=30).json()
    assert listed == [{"id": 0, "path": str(lora), "scale": 0.0, "task_name": "", "prompt_prefix": ""}]
    assert _greedy(url) == base_text
    assert _post(url, "/lora-adapters", body=[{"id": 0, "scale": 1.0}]) == {"success": True}
    assert httpx.get(url + "/lora-adapters", timeout=30).json()[0]["scale"] == 1.0
    adapted = _greedy(url)
    assert adapted != base_text
    assert _post(url, "/lora-adapters", body=[]) == {"success": True}
    assert _greedy(url) == base_text
    assert "must be an array" in _post(url, "/lora-adapters", 400, {"id": 0})["error"]["message"]
    assert "invalid adapter id" in _post(url, "/lora-adapters", 400, [{"id": 3, "scale": 1}])["error"]["message"]
    refused = _post(url, "/completion", 400, {"prompt": "x", "lora": [{"id": 0, "scale": 1}]})["error"]
    assert "POST /lora-adapters" in refused["message"]


@pytest.mark.timeout(120)
def test_lora_flags_give_scales_and_a_bad_file_fails_the_load(
    spawn_worker: Any, tiny_gguf: Path, tmp_path: Path
) -> None:
    """``--lora A,B`` loads each at scale 1, ``--lora-scaled C:1.5`` at its scale, in that order."""
    one, two = write_tiny_lora(tmp_path / "one.gguf"), write_tiny_lora(tmp_path / "two.gguf", seed=2)
    url = spawn_worker(tiny_gguf, "--lora", f"{one},{two}", "--lora-scaled", f"{one}:1.5").wait_ready()
    listed = httpx.get(url + "/lora-adapters", timeout=30).json()
    assert [(a["path"], a["scale"]) for a in listed] == [(str(one), 1.0), (str(two), 1.0), (str(one), 1.5)]
    bad = spawn_worker(tiny_gguf, "--lora", str(tiny_gguf))  # a model, not an adapter
    assert bad.wait_exit() != 0


@pytest.mark.timeout(60)
def test_props_and_lora_without_flags(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    error = _post(url, "/props", 501, {"n_ctx": 5})["error"]
    assert error["type"] == "not_supported_error" and "--props" in error["message"]
    assert httpx.get(url + "/props", timeout=30).json()["endpoint_props"] is False
    assert httpx.get(url + "/lora-adapters", timeout=30).json() == []


@pytest.mark.timeout(60)
def test_props_with_the_flag(spawn_worker: Any, tiny_gguf: Path) -> None:
    url = spawn_worker(tiny_gguf, "--props").wait_ready()
    assert _post(url, "/props", body={"anything": 1}) == {"success": True}
    assert httpx.get(url + "/props", timeout=30).json()["endpoint_props"] is True


def test_lora_scaled_needs_a_scale() -> None:
    assert parse_specs(["a.gguf,b.gguf"], ["c:d.gguf:0.25"]) == [("a.gguf", 1.0), ("b.gguf", 1.0), ("c:d.gguf", 0.25)]
    for bad in ("x.gguf", "x.gguf:big", ":1"):
        with pytest.raises(LoraError, match="FNAME:SCALE"):
            parse_specs([], [bad])
