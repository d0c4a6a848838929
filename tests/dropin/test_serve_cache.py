"""llama.cpp's model cache as a model source: a pre-filled ``LLAMA_CACHE`` in Hugging Face layout."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from huggingface_hub import hf_hub_download

from devtools.hub_server import HubServer
from tests.dropin.conftest import Serve, chat, gguf_repo, models, wait_until
from tests.service_probes import events

KB = 1024


def _fill(cache: Path, hub: HubServer, repo: str, *paths: str) -> None:
    """Download as llama.cpp and ``hf download`` do: blobs, snapshot links, refs/main."""
    for path in paths:
        hf_hub_download(repo, path, cache_dir=str(cache), endpoint=hub.url, token=False)


@pytest.mark.timeout(180)
def test_a_prefilled_llama_cache_is_listed_loaded_and_removable(
    serve: Serve, hub: HubServer, tiny: bytes, tmp_path: Path
) -> None:
    cache = tmp_path / "llama-cache"
    tagged = gguf_repo(hub, tiny, "tagged", {"tagged-Q8_0.gguf": tiny, "tagged-F16.gguf": tiny, "README.md": b"x"})
    split = gguf_repo(
        hub,
        tiny,
        "split",
        {"m-Q4_K_M-00001-of-00002.gguf": 40 * KB, "m-Q4_K_M-00002-of-00002.gguf": 30 * KB, "mmproj-F16.gguf": 10 * KB},
    )
    _fill(cache, hub, tagged, "tagged-Q8_0.gguf", "tagged-F16.gguf")
    _fill(cache, hub, split, "m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf", "mmproj-F16.gguf")
    svc = serve(env={"LLAMA_CACHE": str(cache)})

    listed = models(svc)
    assert {f"{tagged}:Q8_0", f"{tagged}:F16", f"{split}:Q4_K_M"} <= set(listed)
    assert not [name for name in listed if "mmproj" in name.lower() or "00002" in name]
    assert listed[f"{split}:Q4_K_M"]["source"] == "cache" and listed[f"{split}:Q4_K_M"]["can_remove"] is True
    found = events(svc, type="model_discovered", model=f"{split}:Q4_K_M")[0]["data"]
    assert found["source"] == "cache" and [Path(f["path"]).name for f in found["files"]] == [
        "m-Q4_K_M-00001-of-00002.gguf",
        "m-Q4_K_M-00002-of-00002.gguf",
        "mmproj-F16.gguf",
    ]
    assert all(f["sha256"] and f["blob_path"] and f["snapshot_path"].startswith(str(cache)) for f in found["files"])

    assert chat(svc, f"{tagged}:Q8_0").status_code == 200, "a cached model loads from llama.cpp's cache"
    unload = httpx.post(f"{svc.url}/models/unload", json={"model": split}, timeout=30)
    assert unload.status_code == 409 and "not running" in unload.text, "user/repo resolved to its one tag"
    ambiguous = httpx.post(f"{svc.url}/models/load", json={"model": tagged}, timeout=30)
    assert ambiguous.status_code == 409 and f"{tagged}:F16" in ambiguous.text and f"{tagged}:Q8_0" in ambiguous.text

    removed = httpx.delete(f"{svc.url}/models", params={"model": f"{tagged}:F16"}, timeout=30)
    assert removed.status_code == 200, removed.text
    assert f"{tagged}:F16" not in models(svc)
    link = next(cache.glob(f"models--{tagged.replace('/', '--')}/snapshots/*/tagged-F16.gguf"), None)
    assert link is None, "its snapshot link is gone from llama.cpp's cache"
    assert removed.json()["kept_blobs"], "the blob is shared with :Q8_0 (same bytes) and stays"
    assert chat(svc, f"{tagged}:Q8_0").status_code == 200


@pytest.mark.timeout(180)
def test_downloads_land_in_llama_cache_when_it_is_set(
    serve: Serve, hub: HubServer, tiny: bytes, tmp_path: Path
) -> None:
    cache = tmp_path / "llama-cache"
    svc = serve("-c", "300", env={"LLAMA_CACHE": str(cache)})
    repo = gguf_repo(hub, tiny, "pulled")
    httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30).raise_for_status()
    folder = cache / f"models--{repo.replace('/', '--')}"
    wait_until(lambda: any(folder.glob("snapshots/*/pulled-Q8_0.gguf")), "the download in LLAMA_CACHE")
    assert not (svc.home / "hub" / folder.name).exists()
    configured = events(svc, type="model_configured", model=f"{repo}:Q8_0")
    assert configured and configured[-1]["data"]["params"] == {"n_ctx": 300}, "a pulled model gets -c too"


@pytest.mark.timeout(180)
def test_without_llama_cache_the_default_hf_cache_is_listed(
    serve: Serve, hub: HubServer, tiny: bytes, tmp_path: Path
) -> None:
    """``$HF_HOME/hub`` (llama.cpp's default) is listed; downloads stay in ``<home>/hub``."""
    hf_home = tmp_path / "hf-home"
    repo = gguf_repo(hub, tiny, "shared")
    _fill(hf_home / "hub", hub, repo, "shared-Q8_0.gguf")
    svc = serve(env={"HF_HOME": str(hf_home)})
    assert f"{repo}:Q8_0" in models(svc)
    assert chat(svc, repo).status_code == 200, "user/repo names its only tag"
