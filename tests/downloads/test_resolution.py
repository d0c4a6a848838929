"""Resolution of model names against the fake Hub (real huggingface_hub client, real HTTP)."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.hub_repos import RepoInfo, make_repo
from devtools.hub_server import HubServer
from service.downloads.resolution import ResolutionError, resolve
from tests.conftest_hub import unique_repo


def _repo(hub: HubServer, files: dict[str, int | bytes], **kw: Any) -> tuple[str, RepoInfo]:
    repo = unique_repo("res")
    return repo, make_repo(hub.root, repo, files, **kw)


@pytest.mark.timeout(30)
def test_resolution_picks_files_and_maps_errors(hub: HubServer) -> None:
    repo, info = _repo(hub, {"m-Q4_K_M.gguf": 1000, "m-Q8_0.gguf": 2000, "mmproj-F16.gguf": 300, "README.md": b"x"})
    res = resolve(repo + ":q8_0", endpoint=hub.url)
    assert (res.commit, res.quant, res.revision) == (info.commit, "Q8_0", "main")
    assert [f.path for f in res.files] == ["m-Q8_0.gguf", "mmproj-F16.gguf"] and res.total_bytes == 2300
    assert res.files[0].sha256 == info.file("m-Q8_0.gguf").sha256  # type: ignore[union-attr]
    assert res.canonical_name == f"{repo}:Q8_0" and res.available_quants == ("Q4_K_M", "Q8_0")

    def code(name: str, **kw: Any) -> ResolutionError:
        with pytest.raises(ResolutionError) as err:
            resolve(name, **{"endpoint": hub.url, **kw})
        return err.value

    def status(name: str, **kw: Any) -> tuple[str, int]:
        err = code(name, **kw)
        return err.code, err.status

    assert status("not a name") == ("invalid_name", 400)
    assert status(unique_repo("missing")) == ("repo_not_found", 404)
    assert status(repo + "@nope") == ("repo_not_found", 404)
    missing = code(repo + ":Q5_K_M")
    assert (missing.code, missing.status) == ("quant_not_found", 404)
    assert missing.extra["available_quants"] == ["Q4_K_M", "Q8_0"]
    no_gguf, _ = _repo(hub, {"model.safetensors": 100, "README.md": b"x"})
    assert status(no_gguf) == ("no_gguf", 422)
    assert status(repo, endpoint="http://127.0.0.1:9") == ("network", 424)
    hub.set_faults({"kind": "status", "target": "info", "status": 500})
    err = code(repo)
    assert (err.code, err.status, err.extra["upstream_status"]) == ("network", 424, 500)


@pytest.mark.timeout(30)
def test_resolution_of_gated_repo(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    repo, _ = _repo(hub, {"g-Q4_K_M.gguf": 1000}, gated=True, token="hf_good")
    with pytest.raises(ResolutionError) as anon:
        resolve(repo, endpoint=hub.url)
    assert (anon.value.code, anon.value.status) == ("unauthorized", 401)
    with pytest.raises(ResolutionError) as wrong:
        resolve(repo, endpoint=hub.url, token="hf_bad")
    assert (wrong.value.code, wrong.value.status) == ("unauthorized", 403)
    assert resolve(repo, endpoint=hub.url, token="hf_good").gated is True
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    monkeypatch.setenv("HF_ENDPOINT", hub.url)  # both read at call time
    assert resolve(repo).files[0].path == "g-Q4_K_M.gguf"
