"""``--lora``/``--lora-scaled`` and ``/lora-adapters``, and ``POST /props``, on real workers."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
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


def _with(url: str, scale: float | None, n_predict: int = 8) -> dict[str, Any]:
    """A greedy completion with its own ``lora`` (scale of adapter 0; None: no ``lora`` member)."""
    body: dict[str, Any] = {"prompt": "hello there", "n_predict": n_predict, "temperature": 0, "ignore_eos": True}
    if scale is not None:
        body["lora"] = [{"id": 0, "scale": scale}]
    answer: dict[str, Any] = _post(url, "/completion", body=body)
    return answer


@pytest.mark.timeout(180)
def test_a_request_brings_its_own_adapter_scales(spawn_worker: Any, tiny_gguf: Path, tmp_path: Path) -> None:
    """llama-server's per-request ``lora``: a request decodes with its own scales (adapters not named at 0),
    whatever the worker's; scale 0 is no adapter; concurrent requests with different scales each get
    what they get alone (their slots are decoded separately in the same steps); a cached prompt is
    reused only under the same scales; an adapter id the worker has not loaded is a 400."""
    lora = write_tiny_lora(tmp_path / "lora.gguf")
    url = spawn_worker(tiny_gguf, "--lora", str(lora), "-np", "2", "--context-shift").wait_ready()
    adapted = _with(url, None)["content"]  # the worker's own scale: 1
    assert _with(url, 1.0)["content"] == adapted
    zero, half = _with(url, 0.0), _with(url, 0.5)
    assert zero["content"] != adapted
    assert half["timings"]["cache_n"] == 0, "the prompt was cached under other scales: evaluated again"
    again = _with(url, 0.5)
    assert again["content"] == half["content"] and again["timings"]["cache_n"] > 0, "same scales: reused"

    # Side by side: an endless stream at scale 0 (a full context shifts), read until a request at scale 1,
    # started once the stream runs, has finished; the stream's text is a prefix of what scale 0 gives
    # alone, the other's is its own.
    alone = _with(url, 1.0, 24)["content"]
    endless = {
        "prompt": "hello there",
        "n_predict": -1,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "lora": [{"id": 0, "scale": 0.0}],
    }
    pieces: list[str] = []
    with ThreadPoolExecutor(1) as pool, httpx.stream("POST", url + "/completion", json=endless, timeout=60) as r:
        lines = (json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: "))
        pieces.append(next(lines)["content"])
        other = pool.submit(lambda: _with(url, 1.0, 24)["content"])
        for event in lines:
            pieces.append(event["content"])
            if other.done() and len(pieces) > 48:
                break
        else:
            raise AssertionError(f"the stream ended after {len(pieces)} pieces, before the other request")
        steps = httpx.get(url + "/engine/steps", timeout=30).json()["steps"]  # while the stream still runs
        slots = httpx.get(url + "/slots", timeout=30).json()
    assert any(len(step["decoded"]) == 2 for step in steps), "the two ran in the same steps"
    assert sorted(str(s["params"]["lora"]) for s in slots) == ["[]", "[{'id': 0, 'scale': 1.0}]"], "/slots params.lora"
    assert other.result() == alone
    together = "".join(pieces)
    assert together == _with(url, 0.0, 2 * len(pieces) + 8)["content"][: len(together)]

    unknown = _post(url, "/completion", 400, {"prompt": "x", "lora": [{"id": 3, "scale": 1}]})["error"]
    assert unknown["message"] == "invalid adapter id 3" and unknown["type"] == "invalid_request_error"
    not_a_list = _post(url, "/completion", 400, {"prompt": "x", "lora": {"id": 0}})["error"]["message"]
    assert not_a_list == "Error: 'lora' must be an array of objects with 'id' and 'scale' fields"
    assert _post(url, "/lora-adapters", body=[]) == {"success": True}  # no adapter at all now
    assert _with(url, None)["content"] == zero["content"], "scale 0 is no adapter"
    assert _with(url, 1.0)["content"] == adapted, "a request's own scales, whatever the worker's"


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
