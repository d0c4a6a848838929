"""Repos laid out as on the real Hub (split quants, a projector, several tags) through
``modelrouter serve`` started as llama.cpp's documentation starts ``llama-server``;
and llama.cpp's names (``user/repo``, aliases) on every endpoint that takes one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from huggingface_hub import hf_hub_download

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from tests.conftest_hub import unique_repo
from tests.dropin.conftest import Serve, chat, gguf_repo, models, split_repo, wait_until
from tests.service_probes import events, wait_for_event

ROOT = Path(__file__).resolve().parents[2]
SPLIT_FILES = ["split-Q4_K_M-00001-of-00002.gguf", "split-Q4_K_M-00002-of-00002.gguf", "mmproj-F16.gguf"]


def _names(files: list[dict[str, object]]) -> list[str]:
    return sorted(Path(str(f["path"])).name for f in files)


@pytest.mark.timeout(180)
def test_hf_of_a_split_quant_downloads_every_part_and_the_projector_and_loads(
    serve: Serve, hub: HubServer, tiny: bytes, split_parts: tuple[bytes, bytes]
) -> None:
    """``llama-server -hf user/repo:Q4_K_M`` where that quant is split in two parts and the
    repo has an mmproj: both parts and the projector are fetched (not the other quant),
    the model loads from its first part, and it is listed once under llama.cpp's name."""
    repo = split_repo(hub, tiny, split_parts)
    svc = serve("-hf", f"{repo}:q4_k_m")
    name = f"{repo}:Q4_K_M"
    wait_for_event(svc, "instance_ready", model=name, timeout=120)
    finished = events(svc, type="download_finished", model=name)
    assert len(finished) == 1 and _names(finished[0]["data"]["files"]) == sorted(SPLIT_FILES)
    assert chat(svc, name).status_code == 200
    assert chat(svc, repo).status_code == 200, "user/repo names its only known tag"
    listed = [m for m in models(svc) if m.startswith(repo)]
    assert listed == [name], "parts and projector are not models of their own"


@pytest.mark.timeout(240)
def test_a_split_model_pulled_into_llama_cache_is_listed_and_loads_after_a_restart(
    serve: Serve, hub: HubServer, tiny: bytes, split_parts: tuple[bytes, bytes], tmp_path: Path
) -> None:
    """``POST /models`` into ``LLAMA_CACHE``; a new service over that cache (as a new
    llama-server would be) lists it from the cache, as one model, and loads it."""
    cache = tmp_path / "llama-cache"
    repo = split_repo(hub, tiny, split_parts)
    name = f"{repo}:Q4_K_M"
    first = serve(env={"LLAMA_CACHE": str(cache)})
    pulled = httpx.post(f"{first.url}/models", json={"model": name}, timeout=30)
    assert pulled.status_code == 200 and pulled.json()["success"] is True, pulled.text
    wait_for_event(first, "download_finished", model=name, timeout=120)
    first.stop()

    second = serve(env={"LLAMA_CACHE": str(cache)}, home=tmp_path / "second-home")
    entry = models(second)[name]
    assert entry["source"] == "cache" and entry["can_remove"] is True
    assert [m for m in models(second) if m.startswith(repo)] == [name]
    found = events(second, type="model_discovered", model=name)
    assert len(found) == 1 and _names(found[0]["data"]["files"]) == sorted(SPLIT_FILES)
    assert all(str(f["snapshot_path"]).startswith(str(cache)) for f in found[0]["data"]["files"])
    assert chat(second, repo).status_code == 200


@pytest.mark.timeout(240)
def test_user_repo_and_aliases_name_a_model_on_every_endpoint(
    serve: Serve, hub: HubServer, tiny: bytes, models_dir: Path, tmp_path: Path
) -> None:
    """Build 8: ``user/repo`` for the one tag of a repo, 409 listing the tags when several;
    aliases on load, unload, chat, ``?model=`` routes and ``DELETE /models``."""
    cache = tmp_path / "llama-cache"
    one = gguf_repo(hub, tiny, "one")
    two = gguf_repo(hub, tiny, "two", {"two-Q8_0.gguf": tiny, "two-F16.gguf": tiny})
    preset = tmp_path / "presets.ini"
    preset.write_text(f"[tiny-a]\nalias = fast, quick\n\n[{one}:Q8_0]\nalias = cached\n")
    svc = serve("--models-dir", str(models_dir), "--models-preset", str(preset), env={"LLAMA_CACHE": str(cache)})
    for repo, tag in ((one, "Q8_0"), (two, "Q8_0"), (two, "F16")):
        httpx.post(f"{svc.url}/models", json={"model": f"{repo}:{tag}"}, timeout=30).raise_for_status()
        wait_for_event(svc, "download_finished", model=f"{repo}:{tag}", timeout=120)
    assert models(svc)["tiny-a"]["aliases"] == ["fast", "quick"]

    # Load, chat, a ?model= route and unload by alias.
    loaded = httpx.post(f"{svc.url}/models/load", json={"model": "quick"}, timeout=30)
    assert loaded.status_code == 200 and loaded.json()["success"] is True and loaded.json()["model"] == "tiny-a"
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=60)
    assert chat(svc, "fast").json()["model"] == "tiny-a"
    slots = httpx.get(f"{svc.url}/slots", params={"model": "fast"}, timeout=60)
    assert slots.status_code in (200, 404, 501) and slots.status_code != 400
    wait_until(  # recorded once the answer has gone out: a signal to wait for
        lambda: any(e["data"]["route"] == "/slots" for e in events(svc, type="request_completed", model="tiny-a")),
        "the /slots request_completed of tiny-a",
    )
    unloaded = httpx.post(f"{svc.url}/models/unload", json={"model": "fast"}, timeout=30)
    assert unloaded.status_code == 200 and unloaded.json() == {**unloaded.json(), "success": True, "model": "tiny-a"}
    wait_until(lambda: models(svc)["tiny-a"]["status"]["value"] == "unloaded", "tiny-a unloaded")

    # user/repo: one tag known -> that tag; several -> 409 listing them, on every endpoint.
    assert chat(svc, one).json()["model"] == f"{one}:Q8_0"
    for method, path, kwargs in (
        ("POST", "/models/load", {"json": {"model": two}}),
        ("POST", "/models/unload", {"json": {"model": two}}),
        ("POST", "/v1/chat/completions", {"json": {"model": two, **_chat()}}),
        ("DELETE", "/models", {"params": {"model": two}}),
    ):
        ambiguous = httpx.request(method, f"{svc.url}{path}", timeout=30, **kwargs)  # type: ignore[arg-type]
        assert ambiguous.status_code == 409, (path, ambiguous.text)
        assert ambiguous.json()["candidates"] == [f"{two}:F16", f"{two}:Q8_0"], path
        assert ambiguous.json()["error"]["code"] == 409

    # DELETE by alias, and by user/repo: stops the running model first with ?force.
    removed = httpx.delete(f"{svc.url}/models", params={"model": "cached", "force": "true"}, timeout=60)
    assert removed.status_code == 200 and removed.json()["success"] is True, removed.text
    assert removed.json()["model"] == f"{one}:Q8_0" and f"{one}:Q8_0" not in models(svc)
    httpx.delete(f"{svc.url}/models", params={"model": f"{two}:F16"}, timeout=30).raise_for_status()
    by_repo = httpx.delete(f"{svc.url}/models", params={"model": two}, timeout=30)
    assert by_repo.status_code == 200 and by_repo.json()["model"] == f"{two}:Q8_0", by_repo.text
    assert not [m for m in models(svc) if m.startswith((one, two))]


def _chat() -> dict[str, object]:
    return {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


@pytest.mark.timeout(180)
def test_offline_serves_hf_from_llama_cache_without_touching_the_hub(
    serve: Serve, hub: HubServer, tiny: bytes, tmp_path: Path
) -> None:
    """``LLAMA_CACHE=… llama-server --offline -hf user/repo``: the model comes from the cache,
    loads and answers; nothing is asked of the Hub (an explicit pull still downloads:
    test_server_behaviour.py)."""
    cache = tmp_path / "llama-cache"
    repo = gguf_repo(hub, tiny, "offline")
    hf_hub_download(repo, "offline-Q8_0.gguf", cache_dir=str(cache), endpoint=hub.url, token=False)
    hub.reset_stats()
    svc = serve("--offline", "-hf", repo, env={"LLAMA_CACHE": str(cache)})
    wait_for_event(svc, "instance_ready", model=f"{repo}:Q8_0", timeout=60)
    assert chat(svc, repo).status_code == 200
    assert hub.stats()["requests"] == [], "offline: not one request to the Hub"


@pytest.mark.timeout(180)
def test_model_flag_serves_one_local_file(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    """``llama-server -m models/7B/ggml-model.gguf -c 2048`` (the README's first example):
    that file, loaded at start with the options, named after its stem, listed and answering under
    its ``--alias`` (llama-server's id: its first alias)."""
    svc = serve("-m", str(models_dir / "tiny-a.gguf"), "-c", "200", "--alias", "mine")
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=60)
    assert events(svc, type="instance_loading", model="tiny-a")[0]["data"]["params"]["n_ctx"] == 200
    assert events(svc, type="instance_requested", model="tiny-a")[0]["data"]["reason"] == "startup"
    assert models(svc)["mine"]["aliases"] == ["mine"] and models(svc)["mine"]["source"] == "preset"
    assert chat(svc, "mine").json()["model"] == "mine" and chat(svc, "tiny-a").json()["model"] == "mine"
    assert set(models(svc)) == {"mine"}, "-m alone lists no other model"


def test_model_flag_naming_a_missing_file_stops_the_start(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "-m",
            str(tmp_path / "nope.gguf"),
            "--home",
            str(tmp_path),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "HF_HOME": str(tmp_path)},
    )
    assert result.returncode != 0 and f"-m {tmp_path / 'nope.gguf'}: no such file" in result.stderr + result.stdout


@pytest.mark.timeout(180)
def test_model_endpoint_and_hf_token_as_llama_cpp_reads_them(serve: Serve, hub: HubServer, tiny: bytes) -> None:
    """``MODEL_ENDPOINT`` beats ``HF_ENDPOINT`` (common_get_model_endpoint) and ``HF_TOKEN``
    opens a gated repo, for the start-up resolution and the download worker alike."""
    repo = unique_repo("gated")
    token = "hf_dropin_token_0123456789"
    make_repo(hub.root, repo, {"gated-Q8_0.gguf": tiny}, gated=True, token=token)
    svc = serve(
        "-hf", repo, env={"MODEL_ENDPOINT": hub.url + "/", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": token}
    )
    wait_for_event(svc, "instance_ready", model=f"{repo}:Q8_0", timeout=60)
    assert chat(svc, repo).status_code == 200
    assert token not in svc.log_text() and token not in httpx.get(f"{svc.url}/events", timeout=10).text


@pytest.mark.timeout(120)
def test_llama_cpps_environment_alone_configures_the_router(serve: Serve, models_dir: Path) -> None:
    """``LLAMA_ARG_MODELS_DIR=… LLAMA_ARG_CTX_SIZE=128 LLAMA_ARG_NO_MODELS_AUTOLOAD=1
    LLAMA_API_KEY=k llama-server``: the same variables, the same router."""
    key = "env-key-0123456789"
    svc = serve(
        env={
            "LLAMA_ARG_MODELS_DIR": str(models_dir),
            "LLAMA_ARG_CTX_SIZE": "128",
            "LLAMA_ARG_NO_MODELS_AUTOLOAD": "1",
            "LLAMA_API_KEY": key,
            "LLAMA_ARG_MODELS_MAX": "1",
        }
    )
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{svc.url}/models", timeout=10).status_code == 401
    assert set(models(svc, **auth)) == {"tiny-a", "tiny-b"}
    props = httpx.get(f"{svc.url}/props", headers=auth, timeout=10).json()
    assert (props["models_autoload"], props["max_instances"]) == (False, 1)
    configured = httpx.get(
        f"{svc.url}/events", params={"type": "model_configured", "model": "tiny-a"}, headers=auth, timeout=10
    ).json()["events"]
    assert configured[-1]["data"]["params"] == {"n_ctx": 128}
    assert chat(svc, "tiny-a", **auth).status_code == 400, "autoload is off"


@pytest.mark.timeout(120)
def test_the_command_line_issue_8_opens_with(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    """``modelrouter serve --models-preset my.ini --models-max 2 -c 4096 --api-key K``, which
    used to exit with a usage error."""
    preset = tmp_path / "my.ini"
    preset.write_text(f"[*]\nc = 512\n\n[mine]\nmodel = {models_dir / 'tiny-a.gguf'}\nalias = m\ntags = tiny,chat\n")
    svc = serve("--models-preset", str(preset), "--models-max", "2", "-c", "4096", "--api-key", "K-0123456789")
    auth = {"Authorization": "Bearer K-0123456789"}
    assert httpx.get(f"{svc.url}/props", timeout=10).status_code == 401
    assert httpx.get(f"{svc.url}/props", headers=auth, timeout=10).json()["max_instances"] == 2
    assert chat(svc, "m", **auth).status_code == 200
    assert models(svc, **auth)["mine"]["tags"] == ["chat", "tiny"]
    loading = httpx.get(
        f"{svc.url}/events", params={"type": "instance_loading", "model": "mine"}, headers=auth, timeout=10
    ).json()["events"]
    assert loading[0]["data"]["params"]["n_ctx"] == 4096, "the command line beats the preset's [*]"


@pytest.mark.timeout(120)
def test_a_presets_stop_timeout_bounds_that_models_stop(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    """``stop-timeout = 1`` in a section: a worker that does not stop (frozen) is killed after
    1 s, although the global stop timeout is a minute; other models keep the global one."""
    preset = tmp_path / "p.ini"
    preset.write_text(f"[quick]\nmodel = {models_dir / 'tiny-a.gguf'}\nstop-timeout = 1\n")
    svc = serve("--models-preset", str(preset), env={"MODELROUTER_STOP_TIMEOUT": "60"})
    assert chat(svc, "quick").status_code == 200
    pid = models(svc)["quick"]["status"]["instance"]["pid"]
    assert events(svc, type="model_configured", model="quick")[-1]["data"]["stop_timeout"] == 1
    os.kill(pid, signal.SIGSTOP)
    try:
        # 30 s: the global 60 s would time this request out; the model's own 1 s does not.
        unload = httpx.post(f"{svc.url}/models/unload", json={"model": "quick"}, timeout=30)
        assert unload.status_code == 200, unload.text
        stopped = wait_for_event(svc, "instance_stopped", model="quick")
        assert stopped["data"]["forced"] is True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.mark.timeout(240)
def test_hf_file_picks_the_file_on_the_command_line_and_in_a_preset(
    serve: Serve, hub: HubServer, tiny: bytes, split_parts: tuple[bytes, bytes], tmp_path: Path
) -> None:
    """``-hf user/repo --hf-file X.gguf`` serves that file's model; a preset's ``hf-file``
    naming a split's first part gets every part (the repo's default quant is Q4_K_M, split)."""
    repo = split_repo(hub, tiny, split_parts)
    preset = tmp_path / "p.ini"
    preset.write_text(f"[first-part]\nhf-repo = {repo}\nhf-file = split-Q4_K_M-00001-of-00002.gguf\n")
    single = serve("-hf", repo, "--hf-file", "split-Q8_0.gguf")
    wait_for_event(single, "instance_ready", model=f"{repo}:Q8_0", timeout=120)
    fetched = _names(events(single, type="download_finished", model=f"{repo}:Q8_0")[0]["data"]["files"])
    assert "split-Q8_0.gguf" in fetched and not [f for f in fetched if "Q4_K_M" in f]
    single.stop()
    # A preset is a router's source (llama-server ignores --models-preset beside -hf: single-model mode).
    svc = serve("--models-preset", str(preset))
    assert chat(svc, "first-part").status_code == 200
    fetched = _names(events(svc, type="download_finished", model="first-part")[0]["data"]["files"])
    assert {"split-Q4_K_M-00001-of-00002.gguf", "split-Q4_K_M-00002-of-00002.gguf"} <= set(fetched)
