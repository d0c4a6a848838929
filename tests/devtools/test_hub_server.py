"""The fake Hub against the real huggingface_hub client, plus ranges, errors and faults."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, hf_hub_download, scan_cache_dir
from huggingface_hub.errors import (
    GatedRepoError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from devtools.hub_repos import generated_bytes, load_repo, make_repo
from devtools.hub_server import HubServer
from tests.conftest_hub import unique_repo

pytestmark = pytest.mark.timeout(60)


def _client(hub: HubServer) -> httpx.Client:
    return httpx.Client(base_url=hub.url, trust_env=False, timeout=10)


def test_make_repo_is_deterministic_and_records_sha256(tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", "u/r", {"m-Q4_K_M.gguf": 3_000_001, "README.md": b"hi"})
    b = make_repo(tmp_path / "b", "u/r", {"m-Q4_K_M.gguf": 3_000_001, "README.md": b"hi"})
    assert a == b and len(a.commit) == 40
    data = (tmp_path / "a/u/r/files/m-Q4_K_M.gguf").read_bytes()
    assert data[:4] == b"GGUF"
    assert hashlib.sha256(data).hexdigest() == a.file("m-Q4_K_M.gguf").sha256  # type: ignore[union-attr]
    assert data == generated_bytes("u/r", "m-Q4_K_M.gguf", 3_000_001)
    # every 1 MiB block differs, so a resume at a wrong aligned offset changes the hash
    assert data[: 1 << 20] != data[1 << 20 : 2 << 20]
    assert load_repo(tmp_path / "a", "u/r") == a
    readme = a.file("README.md")
    assert readme is not None and not readme.lfs and readme.etag == readme.oid


def test_make_repo_is_fast(tmp_path: Path) -> None:
    start = time.monotonic()
    make_repo(tmp_path, "u/big", {"big.gguf": 64 << 20})
    assert time.monotonic() - start < 5.0


def test_huggingface_hub_client_works_against_it(hub: HubServer, tmp_path: Path) -> None:
    repo = unique_repo("client")
    info = make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 200_000, "sub/mmproj-F16.gguf": 5000, "README.md": b"# hi"})
    api = HfApi(endpoint=hub.url, token=False)
    model = api.model_info(repo)
    assert model.sha == info.commit and model.gated is False
    assert sorted(s.rfilename for s in model.siblings or []) == ["README.md", "m-Q4_K_M.gguf", "sub/mmproj-F16.gguf"]
    assert api.model_info(repo, revision="main").sha == info.commit
    tree = {e.path: e for e in api.list_repo_tree(repo, recursive=True, revision=info.commit)}
    assert set(tree) == {"README.md", "m-Q4_K_M.gguf", "sub", "sub/mmproj-F16.gguf"}
    lfs = tree["m-Q4_K_M.gguf"].lfs  # type: ignore[union-attr]
    assert lfs is not None and lfs.sha256 == info.file("m-Q4_K_M.gguf").sha256 and lfs.size == 200_000  # type: ignore[union-attr]
    assert api.list_repo_refs(repo).branches[0].target_commit == info.commit

    cache = tmp_path / "cache"
    path = hf_hub_download(repo, "m-Q4_K_M.gguf", cache_dir=cache, endpoint=hub.url, token=False)
    assert Path(path).read_bytes() == generated_bytes(repo, "m-Q4_K_M.gguf", 200_000)
    hf_hub_download(repo, "README.md", cache_dir=cache, endpoint=hub.url, token=False)
    (cached,) = scan_cache_dir(cache).repos
    assert cached.repo_id == repo and cached.nb_files == 2
    assert {r.commit_hash for r in cached.revisions} == {info.commit}


def test_errors_map_to_huggingface_hub_exceptions(hub: HubServer, tmp_path: Path) -> None:
    repo = unique_repo("errors")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 1000})
    api = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(unique_repo("missing"))
    with pytest.raises(RevisionNotFoundError):
        api.model_info(repo, revision="nope")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(repo, "nope.gguf", cache_dir=tmp_path, endpoint=hub.url, token=False)


def test_gated_and_private_repos(hub: HubServer, tmp_path: Path) -> None:
    gated, private = unique_repo("gated"), unique_repo("private")
    make_repo(hub.root, gated, {"g-Q4_K_M.gguf": 1000}, gated=True, token="hf_good")
    make_repo(hub.root, private, {"p-Q4_K_M.gguf": 1000}, private=True, token="hf_good")
    assert HfApi(endpoint=hub.url, token=False).model_info(gated).gated == "manual"  # metadata is public
    with pytest.raises(GatedRepoError) as anon:
        hf_hub_download(gated, "g-Q4_K_M.gguf", cache_dir=tmp_path, endpoint=hub.url, token=False)
    assert anon.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as wrong:
        hf_hub_download(gated, "g-Q4_K_M.gguf", cache_dir=tmp_path, endpoint=hub.url, token="hf_bad")
    assert wrong.value.response.status_code == 403
    assert hf_hub_download(gated, "g-Q4_K_M.gguf", cache_dir=tmp_path, endpoint=hub.url, token="hf_good")
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url, token=False).model_info(private)
    assert HfApi(endpoint=hub.url, token="hf_good").model_info(private).private is True


def test_head_headers_and_ranges(hub: HubServer) -> None:
    repo = unique_repo("ranges")
    info = make_repo(hub.root, repo, {"m.gguf": 10_000})
    f = info.file("m.gguf")
    assert f is not None
    data = generated_bytes(repo, "m.gguf", 10_000)
    with _client(hub) as c:
        head = c.head(f"/{repo}/resolve/main/m.gguf")
        assert head.status_code == 200
        assert head.headers["X-Repo-Commit"] == info.commit
        assert head.headers["ETag"] == f'"{f.sha256}"' == head.headers["X-Linked-Etag"]
        assert head.headers["X-Linked-Size"] == head.headers["Content-Length"] == "10000"
        assert head.headers["Accept-Ranges"] == "bytes"
        r = c.get(f"/{repo}/resolve/{info.commit}/m.gguf", headers={"Range": "bytes=4000-"})
        assert r.status_code == 206 and r.content == data[4000:]
        assert r.headers["Content-Range"] == "bytes 4000-9999/10000"
        r = c.get(f"/{repo}/resolve/main/m.gguf", headers={"Range": "bytes=10-19"})
        assert r.status_code == 206 and r.content == data[10:20]
        r = c.get(f"/{repo}/resolve/main/m.gguf", headers={"Range": "bytes=-5"})
        assert r.content == data[-5:]
        r = c.get(f"/{repo}/resolve/main/m.gguf", headers={"Range": "bytes=10000-"})
        assert r.status_code == 416 and r.headers["Content-Range"] == "bytes */10000"
        r = c.get(f"/{repo}/resolve/main/nope.gguf")
        assert r.status_code == 404 and r.headers["X-Error-Code"] == "EntryNotFound"
        assert r.headers["X-Repo-Commit"] == info.commit
    stats = hub.stats()
    assert stats["bytes_served"][f"{repo}/m.gguf"] == 6000 + 10 + 5
    assert [q["range"] for q in stats["requests"] if q["method"] == "GET"][:2] == ["bytes=4000-", "bytes=10-19"]


def test_fault_drop_once_then_normal(hub: HubServer) -> None:
    repo = unique_repo("drop")
    make_repo(hub.root, repo, {"m.gguf": 1_000_000})
    hub.set_faults({"kind": "drop", "repo": repo, "path": "m.gguf", "at_fraction": 0.4})
    with _client(hub) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            c.get(f"/{repo}/resolve/main/m.gguf")
        r = c.get(f"/{repo}/resolve/main/m.gguf", headers={"Range": "bytes=400000-"})
        assert r.status_code == 206 and len(r.content) == 600_000
    assert hub.bytes_served(repo, "m.gguf") == 1_000_000
    assert hub.faults()[0]["times"] == 0 and hub.faults()[0]["hits"] == 1


def test_fault_status_corrupt_and_counted(hub: HubServer) -> None:
    repo = unique_repo("status")
    make_repo(hub.root, repo, {"m.gguf": 100_000})
    data = generated_bytes(repo, "m.gguf", 100_000)
    hub.set_faults({"kind": "status", "path": "m.gguf", "status": 500, "times": 2},
                   {"kind": "corrupt", "path": "m.gguf", "at_offset": 5000})  # fmt: skip
    with _client(hub) as c:
        assert c.head(f"/{repo}/resolve/main/m.gguf").status_code == 500
        assert c.get(f"/{repo}/resolve/main/m.gguf").status_code == 500
        bad = c.get(f"/{repo}/resolve/main/m.gguf").content
        assert len(bad) == len(data) and bad != data and bad[:5000] == data[:5000]
        assert c.get(f"/{repo}/resolve/main/m.gguf").content == data  # every fault used up
    hub.set_faults({"kind": "status", "target": "info", "status": 503})
    with _client(hub) as c:
        assert c.get(f"/api/models/{repo}").status_code == 503
        assert c.get(f"/api/models/{repo}").status_code == 200


def test_fault_throttle_and_stall(hub: HubServer) -> None:
    repo = unique_repo("slow")
    make_repo(hub.root, repo, {"m.gguf": 400_000})
    hub.set_faults({"kind": "throttle", "path": "m.gguf", "rate": 1_000_000, "times": 1})
    with _client(hub) as c:
        start = time.monotonic()
        assert len(c.get(f"/{repo}/resolve/main/m.gguf").content) == 400_000
        assert 0.3 <= time.monotonic() - start < 3.0
        start = time.monotonic()
        c.get(f"/{repo}/resolve/main/m.gguf")
        assert time.monotonic() - start < 0.3  # throttle used up
    hub.set_faults({"kind": "stall", "path": "m.gguf", "after_bytes": 1000, "seconds": 60})
    timeout = httpx.Timeout(10, read=0.5)
    with httpx.Client(base_url=hub.url, trust_env=False, timeout=timeout) as c, pytest.raises(httpx.ReadTimeout):
        c.get(f"/{repo}/resolve/main/m.gguf")
    hub.reset()  # releases the stalled response thread


def test_control_rejects_bad_faults(hub: HubServer) -> None:
    with _client(hub) as c:
        assert c.post("/_control/faults", json={"faults": [{"kind": "explode"}]}).status_code == 400
        assert c.post("/_control/faults", json={"faults": [{"kind": "throttle"}]}).status_code == 400
        assert c.get("/_control/health").json()["ok"] is True
