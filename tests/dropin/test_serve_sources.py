"""llama-server command lines, as llama.cpp's documentation writes them, on ``modelrouter serve``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from tests.conftest_hub import unique_repo
from tests.dropin.conftest import CHAT, Serve, chat, gguf_repo, models
from tests.service_probes import events, wait_for_event

ROOT = Path(__file__).resolve().parents[2]
LLAMA_NOT_LOADED = {"code": 400, "message": "model is not loaded", "type": "invalid_request_error"}


@pytest.mark.timeout(120)
def test_models_dir_with_per_model_defaults(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    """``llama-server --models-dir ./models -c 200 -ngl 99 -cmoe --temp 0.3``: every model gets the
    defaults (``--temp``: every request's); what the worker cannot honour (``-cmoe``) is warned about
    once and recorded as ignored."""
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.gguf").write_bytes(b"GGUF")
    (models_dir / "escape.gguf").symlink_to(outside / "secret.gguf")
    svc = serve("--models-dir", str(models_dir), "-c", "200", "-ngl", "99", "-cmoe", "--temp", "0.3")
    listed = models(svc)
    assert set(listed) == {"tiny-a", "tiny-b"} and listed["tiny-a"]["source"] == "models_dir"
    configured = events(svc, type="model_configured", model="tiny-a")[-1]["data"]
    assert configured["params"] == {"n_ctx": 200, "n_gpu_layers": "99", "sampling": {"temperature": 0.3}}
    assert configured["ignored"] == ["cpu-moe"]
    assert configured["args"] == {"ctx-size": "200", "n-gpu-layers": "99", "cpu-moe": "1", "temperature": "0.3"}
    status = listed["tiny-a"]["status"]
    assert status["args"] == ["--cpu-moe", "--ctx-size", "200", "--n-gpu-layers", "99", "--temperature", "0.3"]
    assert status["preset"] == "[tiny-a]\ncpu-moe = 1\nctx-size = 200\nn-gpu-layers = 99\ntemperature = 0.3\n\n"
    assert listed["tiny-a"]["architecture"] == {"input_modalities": ["text"], "output_modalities": ["text"]}
    assert chat(svc, "tiny-a").status_code == 200
    assert events(svc, type="instance_loading", model="tiny-a")[0]["data"]["params"]["n_ctx"] == 200
    log = svc.log_text()
    assert log.count('"option": "cpu-moe"') == 1, "warned once, not once per model"
    assert '"event": "model_file_refused"' in log and "escape.gguf" in log
    discovered = {e["model"] for e in events(svc, type="model_discovered")}
    assert "escape" not in discovered, "a symlink out of the models dir is never listed"


@pytest.mark.timeout(120)
def test_preset_hf_repo_is_downloaded_on_first_use(serve: Serve, hub: HubServer, tiny: bytes, tmp_path: Path) -> None:
    """``--models-preset`` with an ``hf-repo`` section: listed at once, downloaded by a download
    worker (with its events) when first used, the request waiting for it (llama.cpp #24822, #19351)."""
    repo = gguf_repo(hub, tiny, "remote")
    preset = tmp_path / "my-models.ini"
    preset.write_text(f"[*]\nc = 128\n\n[remote]\nhf-repo = {repo}:q8_0\nalias = rem\ndedup-cache-models = true\n")
    svc = serve("--models-preset", str(preset))
    assert models(svc)["remote"]["status"]["value"] == "unloaded"
    answer = chat(svc, "rem")
    assert answer.status_code == 200, answer.text
    types = [e["type"] for e in events(svc, model="remote", type=["download_*", "instance_ready"])]
    assert types[0] == "download_requested" and "download_finished" in types and types[-1] == "instance_ready"
    assert events(svc, type="instance_requested", model="remote")[0]["data"]["params"] == {"n_ctx": 128}
    # Now in the cache: a reload lists it by llama.cpp's name, except that the preset dedups it.
    httpx.post(f"{svc.url}/models/reload", timeout=60).raise_for_status()
    assert f"{repo}:Q8_0" not in models(svc), "hidden by dedup-cache-models"
    assert chat(svc, f"{repo}:Q8_0").status_code == 200, "hidden, yet usable by name"


def _preset_repo(hub: HubServer, tiny: bytes) -> tuple[str, str, str]:
    first, second = gguf_repo(hub, tiny, "stories"), gguf_repo(hub, tiny, "tinygemma")
    preset_repo = unique_repo("test-preset-ci")
    text = f"version = 1\n[*]\nbatch-size = 64\n[stories260K-test]\nhf-repo = {first}:Q8_0\ntemp = 0\n"
    text += f"[tinygemma3-preset]\nhf-repo = {second}\n"
    make_repo(hub.root, preset_repo, {"preset.ini": text.encode(), "README.md": b"presets\n"})
    return preset_repo, first, second


@pytest.mark.timeout(120)
def test_hf_of_a_preset_repo_runs_as_a_router_over_its_models(serve: Serve, hub: HubServer, tiny: bytes) -> None:
    """``llama-server -hf ggml-org/test-preset-ci``: the repo holds preset.ini, so the service is a
    router over its models. The seed's regression: deciding "single model" before looking at the
    repo started a model with an empty path; here nothing loads at start."""
    preset_repo, first, _ = _preset_repo(hub, tiny)
    svc = serve("-hf", preset_repo)
    listed = models(svc)
    assert {"stories260K-test", "tinygemma3-preset"} <= set(listed)
    assert all(m["status"]["value"] == "unloaded" for m in listed.values())
    assert events(svc, type="instance_requested") == [], "a router: nothing is loaded at start"
    assert "only use presets you trust" in svc.log_text()
    assert chat(svc, "stories260K-test").status_code == 200
    configured = events(svc, type="model_configured", model="stories260K-test")[-1]["data"]
    assert configured["hf_repo"] == f"{first}:Q8_0" and configured["params"] == {
        "n_batch": 64,
        "sampling": {"temperature": 0.0},
    }
    stats = hub.stats()
    fetched = {r["file"] for r in stats["requests"] if r["repo"] == preset_repo and r.get("file")}
    assert fetched == {f"{preset_repo}/preset.ini"}, "only preset.ini is fetched from a preset repo"


def _start_fails(*args: str, env: dict[str, str], home: Path) -> str:
    cmd = [sys.executable, "-m", "service.cli", "serve", *args, "--home", str(home), "--port", "0"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, **env})
    assert result.returncode != 0
    return result.stdout + result.stderr


@pytest.mark.timeout(120)
def test_remote_presets_are_held_to_llama_cpps_whitelist(hub: HubServer, tmp_path: Path) -> None:
    repo = unique_repo("evil-preset")
    make_repo(hub.root, repo, {"preset.ini": b"[m]\nmodel = /etc/passwd\n"})
    output = _start_fails("-hf", repo, env={"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path)}, home=tmp_path)
    assert "[m] model: not allowed in remote presets" in output


@pytest.mark.timeout(120)
def test_a_bad_preset_stops_the_start_naming_file_section_and_key(tmp_path: Path) -> None:
    unknown = tmp_path / "unknown.ini"
    unknown.write_text("[tiny]\nmodel = /nowhere.gguf\nn_gpu_layerz = 3\n")
    output = _start_fails("--models-preset", str(unknown), env={"HF_HOME": str(tmp_path)}, home=tmp_path)
    assert f"{unknown}: [tiny] n_gpu_layerz: unknown key" in output
    missing = tmp_path / "missing.ini"
    missing.write_text("[tiny]\nmodel = /nowhere.gguf\n")
    output = _start_fails("--models-preset", str(missing), env={"HF_HOME": str(tmp_path)}, home=tmp_path)
    assert f"{missing}: [tiny] model = /nowhere.gguf: no such file" in output


@pytest.mark.timeout(120)
def test_hf_of_a_gguf_repo_serves_that_model(serve: Serve, hub: HubServer, tiny: bytes, models_dir: Path) -> None:
    """``llama-server -hf user/repo --alias mine``: the single model is downloaded, loaded at
    start and answers to its name, its alias and ``user/repo``; it alone is listed (single-model
    mode: llama-server reads ``--models-dir`` only as a router), under its alias (llama-server's id)."""
    repo = gguf_repo(hub, tiny, "single")
    svc = serve("-hf", repo, "--alias", "mine", "--models-dir", str(models_dir))
    assert list(models(svc)) == ["mine"], "-hf serves one model, not --models-dir's; its alias is its id"
    ready = wait_for_event(svc, "instance_ready", model=f"{repo}:Q8_0", timeout=60)
    assert ready["data"]["endpoint"]
    assert models(svc)["mine"]["aliases"] == ["mine"] and models(svc)["mine"]["path"].endswith("single-Q8_0.gguf")
    for name in ("mine", repo, f"{repo}:Q8_0"):
        assert chat(svc, name).status_code == 200, name
    assert events(svc, type="instance_requested")[0]["data"]["reason"] == "startup"


@pytest.mark.timeout(120)
def test_no_models_autoload(serve: Serve, models_dir: Path) -> None:
    """``--no-models-autoload``: a request does not load the model; an explicit load does."""
    svc = serve("--models-dir", str(models_dir), "--no-models-autoload")
    for path in ("/v1/chat/completions", "/chat/completions", "/completion"):
        refused = httpx.post(f"{svc.url}{path}", json={"model": "tiny-a", "prompt": "x", **CHAT}, timeout=30)
        assert refused.status_code == 400, (path, refused.text)
        assert refused.json()["error"] == LLAMA_NOT_LOADED, "llama.cpp's body, word for word"
        assert "tiny-a" in refused.json()["detail"]
    assert models(svc)["tiny-a"]["status"]["value"] == "unloaded"
    assert events(svc, type="instance_requested") == [], "a refused request starts nothing"
    httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=30).raise_for_status()
    wait_for_event(svc, "instance_ready", model="tiny-a")
    assert chat(svc, "tiny-a").status_code == 200
    asked = httpx.post(
        f"{svc.url}/v1/chat/completions", params={"autoload": "true"}, json={"model": "tiny-b", **CHAT}, timeout=120
    )
    assert asked.status_code == 200, "?autoload=true overrides it per request, as in llama.cpp"
