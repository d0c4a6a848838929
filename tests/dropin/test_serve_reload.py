"""Reload: ``GET /models?reload=1`` and ``POST /models/reload`` re-read presets, models dir and caches."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from huggingface_hub import hf_hub_download

from devtools.hub_server import HubServer
from tests.dropin.conftest import Serve, chat, gguf_repo, models
from tests.service_probes import events, wait_for_event


@pytest.mark.timeout(180)
def test_reload_adds_changes_and_removes_models(serve: Serve, models_dir: Path, tiny: bytes, tmp_path: Path) -> None:
    preset = tmp_path / "presets.ini"
    preset.write_text("[tiny-a]\nc = 100\n")
    svc = serve("--models-dir", str(models_dir), "--models-preset", str(preset))
    for name in ("tiny-a", "tiny-b"):
        answer = chat(svc, name)
        assert answer.status_code == 200, answer.text

    (models_dir / "tiny-c.gguf").write_bytes(tiny)  # added
    preset.write_text("[tiny-a]\nc = 200\n")  # changed, and running
    (models_dir / "tiny-b.gguf").unlink()  # removed, and running
    answer = httpx.get(f"{svc.url}/models", params={"reload": "1"}, timeout=60)
    assert answer.status_code == 200
    listed = {m["id"] for m in answer.json()["data"]}
    assert listed == {"tiny-a", "tiny-c"}, "the listing already shows the reload"

    reloaded = events(svc, type="models_reloaded")[-1]["data"]
    assert (reloaded["added"], reloaded["changed"], reloaded["removed"]) == (["tiny-c"], ["tiny-a"], ["tiny-b"])
    assert sorted(reloaded["unloaded"]) == ["tiny-a", "tiny-b"]
    stopped = {e["model"]: e["data"]["reason"] for e in events(svc, type="instance_stop_requested")}
    assert stopped == {"tiny-a": "reload", "tiny-b": "removed"}
    assert events(svc, type="model_removed", model="tiny-b")

    assert chat(svc, "tiny-a").status_code == 200
    requested = events(svc, type="instance_requested", model="tiny-a")
    assert requested[-1]["data"]["params"] == {"n_ctx": 200}, "the next load uses the new settings"
    assert chat(svc, "tiny-b").status_code == 404


@pytest.mark.timeout(120)
def test_post_reload_answers_what_changed_and_a_broken_preset_changes_nothing(
    serve: Serve, models_dir: Path, tmp_path: Path
) -> None:
    preset = tmp_path / "presets.ini"
    preset.write_text("[tiny-a]\nalias = first\n")
    svc = serve("--models-dir", str(models_dir), "--models-preset", str(preset))
    nothing = httpx.post(f"{svc.url}/models/reload", timeout=60).json()
    assert nothing == {"success": True, "added": [], "changed": [], "removed": [], "unloaded": []}

    preset.write_text("[tiny-a]\nalias = first\nno_such_key = 1\n")
    refused = httpx.post(f"{svc.url}/models/reload", timeout=60)
    assert refused.status_code == 400 and "no_such_key" in refused.json()["detail"]
    assert models(svc)["tiny-a"]["aliases"] == ["first"], "the last good reading stays in force"

    preset.write_text("[tiny-a]\nalias = second\n")
    changed = httpx.post(f"{svc.url}/models/reload", timeout=60).json()
    assert changed["changed"] == ["tiny-a"] and models(svc)["tiny-a"]["aliases"] == ["second"]
    assert len(events(svc, type="models_reloaded")) == 2


@pytest.mark.timeout(120)
def test_a_removed_running_model_is_stopped_first(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    preset = tmp_path / "presets.ini"
    preset.write_text(f"[extra]\nmodel = {models_dir / 'tiny-a.gguf'}\nload-on-startup = true\n")
    svc = serve("--models-preset", str(preset))
    wait_for_event(svc, "instance_ready", model="extra")
    preset.write_text("")
    plan = httpx.post(f"{svc.url}/models/reload", timeout=60).json()
    assert plan["removed"] == ["extra"] and plan["unloaded"] == ["extra"]
    order = [e["type"] for e in events(svc, model="extra", type=["instance_stopped", "model_removed"])]
    assert order == ["instance_stopped", "model_removed"]
    assert "extra" not in models(svc)


@pytest.mark.timeout(180)
def test_reload_reads_llama_cache_again(serve: Serve, hub: HubServer, tiny: bytes, tmp_path: Path) -> None:
    """A model put into ``LLAMA_CACHE`` by another tool (``hf download``, a llama-server)
    while the router runs appears on reload; one deleted from it there disappears."""
    cache = tmp_path / "llama-cache"
    kept, added = gguf_repo(hub, tiny, "kept"), gguf_repo(hub, tiny, "added")
    hf_hub_download(kept, "kept-Q8_0.gguf", cache_dir=str(cache), endpoint=hub.url, token=False)
    svc = serve(env={"LLAMA_CACHE": str(cache)})
    assert f"{kept}:Q8_0" in models(svc) and f"{added}:Q8_0" not in models(svc)

    hf_hub_download(added, "added-Q8_0.gguf", cache_dir=str(cache), endpoint=hub.url, token=False)
    shutil.rmtree(cache / f"models--{kept.replace('/', '--')}")
    listed = httpx.get(f"{svc.url}/models", params={"reload": "1"}, timeout=60).json()["data"]
    assert {m["id"] for m in listed} >= {f"{added}:Q8_0"} and f"{kept}:Q8_0" not in {m["id"] for m in listed}
    reloaded = events(svc, type="models_reloaded")[-1]["data"]
    assert (reloaded["added"], reloaded["removed"]) == ([f"{added}:Q8_0"], [f"{kept}:Q8_0"])
    assert events(svc, type="model_discovered", model=f"{added}:Q8_0")[0]["data"]["source"] == "cache"
    assert chat(svc, added).status_code == 200
