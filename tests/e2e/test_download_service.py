"""Downloads through the real service: real worker processes, real huggingface_hub
against the project's Hub server, real files in an HF cache layout."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from httpx_sse import connect_sse
from huggingface_hub import scan_cache_dir

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from tests.conftest_hub import unique_repo
from tests.service_probes import events, model_entry, still_running, wait_for_event

MB = 1024 * 1024


@pytest.fixture
def svc(hub: HubServer, tmp_path: Path) -> Iterator[ServiceProcess]:
    proc = ServiceProcess(tmp_path / "home", env={"HF_ENDPOINT": hub.url, "MODELROUTER_STALL_TIMEOUT": "5"})
    proc.start()
    yield proc
    proc.stop()


def _download(svc: ServiceProcess, model: str) -> httpx.Response:
    return httpx.post(f"{svc.url}/models", json={"model": model}, timeout=30)


def _wait_job(svc: ServiceProcess, job_id: str, statuses: set[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = httpx.get(f"{svc.url}/downloads/{job_id}", timeout=5).json()
        if job["status"] in statuses:
            return job
        time.sleep(0.02)
    msg = f"job {job_id} not in {statuses}: {job}"
    raise AssertionError(msg)


def _wait_progress(svc: ServiceProcess, job_id: str, fraction: float) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job = httpx.get(f"{svc.url}/downloads/{job_id}", timeout=5).json()
        if job["bytes_total"] and job["bytes_done"] >= fraction * job["bytes_total"]:
            return job
        time.sleep(0.01)
    msg = f"job {job_id} never reached {fraction:.0%}"
    raise AssertionError(msg)


def _stamp(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["recorded_at"].replace("Z", "+00:00"))


def _worker(job: dict[str, Any]) -> psutil.Process:
    return psutil.Process(job["pid"])


@pytest.mark.timeout(90)
def test_happy_path_split_gguf_and_mmproj(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("split")
    make_repo(
        hub.root,
        repo,
        {
            "m-Q4_K_M-00001-of-00002.gguf": 3 * MB,
            "m-Q4_K_M-00002-of-00002.gguf": 2 * MB,
            "mmproj-m-f16.gguf": MB,
            "m-Q8_0.gguf": 4 * MB,
            "README.md": b"# test\n",
        },
    )
    seen: list[str] = []
    listening = threading.Event()

    def listen() -> None:
        with (
            httpx.Client(timeout=60) as client,
            connect_sse(client, "GET", f"{svc.url}/events/stream?type=download_*") as source,
        ):
            listening.set()
            for sse in source.iter_sse():
                if sse.event.startswith("download_"):
                    seen.append(sse.event)
                if sse.event in {"download_finished", "download_failed"}:
                    return

    listener = threading.Thread(target=listen)
    listener.start()
    assert listening.wait(10)
    answer = _download(svc, repo)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["success"] is True and body["model"] == f"{repo}:Q4_K_M"
    assert sorted(f["path"] for f in body["files"]) == [
        "m-Q4_K_M-00001-of-00002.gguf",
        "m-Q4_K_M-00002-of-00002.gguf",
        "mmproj-m-f16.gguf",
    ]
    job = _wait_job(svc, body["job_id"], {"finished", "failed"})
    listener.join(30)
    assert job["status"] == "finished", job
    assert seen[:2] == ["download_requested", "download_started"] and seen[-1] == "download_finished"
    assert set(seen[2:-1]) == {"download_progress"} and len(seen) >= 4
    entry = model_entry(svc, f"{repo}:Q4_K_M")
    assert entry["status"]["value"] == "unloaded" and entry["path"].endswith("m-Q4_K_M-00001-of-00002.gguf")
    cache = svc.home / "hub"
    (info,) = [r for r in scan_cache_dir(cache).repos if r.repo_id == repo]
    assert {f.file_name for r in info.revisions for f in r.files} == {
        "m-Q4_K_M-00001-of-00002.gguf",
        "m-Q4_K_M-00002-of-00002.gguf",
        "mmproj-m-f16.gguf",
    }
    snapshot = Path(entry["path"])
    assert snapshot.is_symlink() and snapshot.resolve().parent.name == "blobs"
    assert list(cache.rglob("*.incomplete")) == []


@pytest.mark.timeout(60)
def test_connection_dropped_at_40_percent_resumes(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("drop")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 8 * MB})
    hub.set_faults({"kind": "drop", "repo": repo, "path": "m-Q4_K_M.gguf", "at_fraction": 0.4})
    job = _wait_job(svc, _download(svc, repo).json()["job_id"], {"finished", "failed"})
    assert job["status"] == "finished", job
    assert hub.bytes_served(repo, "m-Q4_K_M.gguf") <= 1.05 * 8 * MB


@pytest.mark.timeout(60)
def test_worker_killed_at_50_percent_then_resumed(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("kill")
    size = 16 * MB
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": size})
    # Every response stalls at 60 %: the worker is still running when killed, however slow we are.
    hub.set_faults(
        {"kind": "throttle", "repo": repo, "rate": 8 * MB},
        {"kind": "stall", "repo": repo, "at_fraction": 0.6, "times": None},
    )
    first = _download(svc, repo).json()
    job = _wait_progress(svc, first["job_id"], 0.5)
    os.kill(job["pid"], signal.SIGKILL)
    failed = wait_for_event(svc, "download_failed", timeout=30)  # how fast: bench/reaction.py
    assert failed["data"]["reason"] == "worker_crashed" and failed["data"]["retryable"] is True
    served = hub.bytes_served(repo, "m-Q4_K_M.gguf")
    hub.reset()  # no more faults for the resumed download
    second = _download(svc, repo).json()
    assert second["job_id"] != first["job_id"]
    finished = _wait_job(svc, second["job_id"], {"finished", "failed"})
    assert finished["status"] == "finished"
    started = events(svc, type="download_started")[-1]["data"]
    assert started["resumed_bytes"] >= 0.4 * size
    assert served + hub.bytes_served(repo, "m-Q4_K_M.gguf") <= 1.05 * size


@pytest.mark.timeout(60)
@pytest.mark.parametrize("discard", [False, True])
def test_cancel_at_30_percent(svc: ServiceProcess, hub: HubServer, discard: bool) -> None:
    repo = unique_repo("cancel")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 16 * MB})
    # Every response stalls at 50 %: only the cancel can end this job, however slow we are.
    hub.set_faults(
        {"kind": "throttle", "repo": repo, "rate": 4 * MB},
        {"kind": "stall", "repo": repo, "at_fraction": 0.5, "times": None},
    )
    body = _download(svc, repo).json()
    job = _wait_progress(svc, body["job_id"], 0.3)
    listed = model_entry(svc, body["model"])["status"]
    assert listed["value"] == "downloading" and listed["progress"]["fraction"] >= 0.3
    worker = _worker(job)
    if discard:
        answer = httpx.delete(f"{svc.url}/downloads/{body['job_id']}?discard=true", timeout=30)
    else:
        answer = httpx.post(f"{svc.url}/models/unload", json={"model": body["model"]}, timeout=30)
    assert answer.status_code == 200
    cancelled = wait_for_event(svc, "download_cancelled", timeout=30)  # how fast: bench/reaction.py
    assert cancelled["data"]["discarded"] is discard
    assert events(svc, type="download_failed") == [] and events(svc, type="download_finished") == []
    assert still_running([worker], 30) == []
    partials = list((svc.home / "hub").rglob("*.incomplete"))
    if discard:
        assert partials == []
    else:
        assert len(partials) == 1 and partials[0].stat().st_size >= 0.3 * 16 * MB
    assert httpx.get(f"{svc.url}/downloads/{body['job_id']}").json()["status"] == "cancelled"


@pytest.mark.timeout(60)
def test_wrong_bytes_fail_checksum_and_publish_nothing(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("corrupt")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 2 * MB})
    hub.set_faults({"kind": "corrupt", "repo": repo, "at_fraction": 0.5, "times": None})
    job = _wait_job(svc, _download(svc, repo).json()["job_id"], {"finished", "failed"})
    assert job["status"] == "failed" and job["error"]["reason"] == "checksum_mismatch"
    cache = svc.home / "hub"
    assert not [p for p in cache.rglob("*") if p.is_file() and "blobs" in p.parts and not p.name.endswith(".lock")]
    assert list(cache.rglob("snapshots/*/*")) == []
    assert model_entry(svc, f"{repo}:Q4_K_M")["status"]["value"] == "failed"


@pytest.mark.timeout(60)
def test_resolution_errors_are_clear_4xx_and_start_nothing(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("errors")
    make_repo(hub.root, repo, {"m-Q8_0.gguf": 1024, "m-Q5_K_M.gguf": 1024})
    gated = unique_repo("gated")
    make_repo(hub.root, gated, {"m-Q4_K_M.gguf": 1024}, gated=True, token="secret")
    cases = {
        "not a name": (400, "invalid_name"),
        "tester/does-not-exist-GGUF": (404, "repo_not_found"),
        gated: (401, "unauthorized"),
        f"{repo}:IQ2_XXS": (404, "quant_not_found"),
    }
    for name, (status, code) in cases.items():
        answer = _download(svc, name)
        assert answer.status_code == status, (name, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["type"] == f"/problems/{code}"
    missing_quant = _download(svc, f"{repo}:IQ2_XXS").json()
    assert sorted(missing_quant["available_quants"]) == ["Q5_K_M", "Q8_0"]
    assert httpx.post(f"{svc.url}/models", json={}, timeout=5).status_code == 400
    assert events(svc, type="download_requested") == []
    assert [
        p for p in psutil.Process(svc.pid).children(recursive=True) if "workers.download" in " ".join(p.cmdline())
    ] == []


@pytest.mark.timeout(60)
def test_two_concurrent_requests_share_one_job_and_one_worker(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("dedupe")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 8 * MB})
    # The download stalls until both answers are in, so the second request always finds it running.
    hub.set_faults({"kind": "stall", "repo": repo, "at_fraction": 0.5, "times": None})
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: _download(svc, repo).json(), range(2)))
    assert answers[0]["job_id"] == answers[1]["job_id"]
    assert sorted(a["joined"] for a in answers) == [False, True]
    hub.reset()  # releases the stalled response: the worker resumes and finishes
    _wait_job(svc, answers[0]["job_id"], {"finished"})
    assert len(events(svc, type="download_requested")) == 1
    assert len(events(svc, type="download_started")) == 1
    # Downloading again once done starts nothing.
    again = _download(svc, repo).json()
    assert again["already_downloaded"] is True and again["job_id"] is None


@pytest.mark.timeout(90)
def test_progress_is_throttled_for_a_fast_50mb_download(svc: ServiceProcess, hub: HubServer) -> None:
    repo = unique_repo("throttle")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 50 * MB})
    job = _wait_job(svc, _download(svc, repo).json()["job_id"], {"finished", "failed"})
    assert job["status"] == "finished"
    started = events(svc, type="download_started")[-1]
    progress = events(svc, type="download_progress")
    steady, final = progress[:-1], progress[-1]  # the final 100 % event is always sent
    assert final["data"]["bytes_done"] == 50 * MB
    # The worker decides each steady event >= 0.5 s after the previous one, and only after
    # download_started was committed; each is stamped when committed, after it was decided.
    # So the log spans at least 0.5 s per steady event, however slow the machine or the
    # commits (a per-pair gap would not: one late commit shortens the next gap).
    # 0.45: the wall clock may be slewed against the worker's monotonic one.
    span = (_stamp(steady[-1]) - _stamp(started)).total_seconds() if steady else 0.0
    assert span >= 0.45 * (len(steady) - 1), (len(steady), span)
    done = [e["data"]["bytes_done"] for e in steady]
    assert all(b - a >= 0.005 * 50 * MB for a, b in itertools.pairwise(done)), done  # and >= 0.5 % apart


@pytest.mark.timeout(60)
def test_disk_full_fails_clearly_and_the_service_stays_up(hub: HubServer, tmp_path: Path) -> None:
    """A 4 MiB RLIMIT_FSIZE that the worker inherits (ENOSPC-like EFBIG in the middle
    of the transfer): the worker's own failure path. (A cache on a file system too
    small for the download is refused by the service before it starts, with 507:
    tests/api/test_limits.py.)"""
    env = {"HF_ENDPOINT": hub.url}
    with ServiceProcess(tmp_path / "home", env=env, file_size_limit=4 * MB) as svc:
        repo = unique_repo("full")
        make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 8 * MB})
        job = _wait_job(svc, _download(svc, repo).json()["job_id"], {"finished", "failed"})
        assert job["status"] == "failed" and job["error"]["reason"] == "disk_full"
        assert "bytes" in job["error"]["message"] or "space" in job["error"]["message"]
        assert httpx.get(f"{svc.url}/health").status_code == 200
        assert model_entry(svc, f"{repo}:Q4_K_M")["status"]["value"] == "failed"


@pytest.mark.timeout(90)
def test_remove_keeps_shared_blobs_and_refuses_loaded_models(
    svc: ServiceProcess, hub: HubServer, tmp_path: Path
) -> None:
    from devtools.tiny_gguf import write_tiny_gguf

    repo = unique_repo("remove")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf").read_bytes()
    # Two quants with identical bytes share one blob.
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": gguf, "m-Q8_0.gguf": gguf})
    for quant in ("Q4_K_M", "Q8_0"):
        job = _wait_job(svc, _download(svc, f"{repo}:{quant}").json()["job_id"], {"finished", "failed"})
        assert job["status"] == "finished"
    blobs = [p for p in (svc.home / "hub").rglob("blobs/*") if not p.name.endswith((".lock", ".incomplete"))]
    assert len(blobs) == 1
    removed = httpx.delete(f"{svc.url}/models", params={"model": f"{repo}:Q4_K_M"}, timeout=30)
    assert removed.status_code == 200 and removed.json()["bytes_freed"] == 0
    assert blobs[0].exists(), "a blob another snapshot uses must stay"
    assert f"{repo}:Q4_K_M" not in [m["id"] for m in httpx.get(f"{svc.url}/models").json()["data"]]
    chat = {"model": f"{repo}:Q8_0", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    assert httpx.post(f"{svc.url}/v1/chat/completions", json=chat, timeout=60).status_code == 200
    refused = httpx.delete(f"{svc.url}/models", params={"model": f"{repo}:Q8_0"}, timeout=30)
    assert refused.status_code == 409 and refused.headers["content-type"].startswith("application/problem+json")
    forced = httpx.delete(f"{svc.url}/models", params={"model": f"{repo}:Q8_0", "force": "true"}, timeout=30)
    assert forced.status_code == 200 and forced.json()["bytes_freed"] == len(gguf)
    assert not blobs[0].exists()
    assert [e["data"]["reason"] for e in events(svc, type="instance_stop_requested")] == ["remove"]
    assert [e["model"] for e in events(svc, type="model_removed")] == [f"{repo}:Q4_K_M", f"{repo}:Q8_0"]
    assert httpx.delete(f"{svc.url}/models", params={"model": "nope/nope"}, timeout=10).status_code == 404
