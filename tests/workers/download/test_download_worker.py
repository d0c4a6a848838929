"""The download worker as a real process against the fake Hub: resume, faults, cancel, disk, locks."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from huggingface_hub import hf_hub_download, scan_cache_dir

from devtools.hub_repos import RepoInfo, make_repo
from devtools.hub_server import HubServer
from service.core.cache_layout import CachePaths
from service.downloads.resolution import resolve
from tests.conftest_hub import (
    REPO_ROOT,
    DownloadProc,
    download_command,
    unique_repo,
    worker_env,
)
from tests.service_probes import still_running
from workers.download import ProgressMeter
from workers.runtime import read_jsonl

MB = 1_000_000
Spawn = Callable[..., DownloadProc]


def _repo(hub: HubServer, files: dict[str, int | bytes], **kw: Any) -> tuple[str, RepoInfo]:
    repo = unique_repo(kw.pop("prefix", "dl"))
    return repo, make_repo(hub.root, repo, files, **kw)


def _spec(hub: HubServer, repo: str, **kw: Any) -> dict[str, Any]:
    return resolve(repo, endpoint=hub.url, **kw).to_spec()


def _partial_size(cache: Path, repo: str, sha: str) -> int:
    try:
        return CachePaths(cache, repo).incomplete(sha).stat().st_size
    except FileNotFoundError:
        return 0


# --- happy path --------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_download_split_model_into_hf_cache(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    repo, info = _repo(
        hub,
        {
            "m-Q4_K_M-00001-of-00002.gguf": 3 * MB,
            "m-Q4_K_M-00002-of-00002.gguf": 2 * MB,
            "mmproj-m-F16.gguf": 300_000,
            "m-Q8_0.gguf": 1000,
            "README.md": b"x",
        },
    )
    spec, cache = _spec(hub, repo), tmp_path / "hub"
    w = spawn_download(spec, cache)
    assert w.wait() == 0, w.stderr()
    types = w.types()
    assert types[0] == "download_started" and types[-1] == "download_finished"
    assert set(types[1:-1]) == {"download_progress"}
    started, finished = w.of_type("download_started")[0], w.of_type("download_finished")[0]
    assert started["job_id"] == w.job_id and started["pid"] == w.proc.pid and started["resumed_bytes"] == 0
    without_urls = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in spec.files]
    assert started["files"] == without_urls and started["total_bytes"] == 5_300_000
    assert started["commit"] == finished["commit"] == info.commit
    assert finished["bytes_total"] == finished["bytes_transferred"] == 5_300_000
    assert w.of_type("download_progress")[-1]["bytes_done"] == 5_300_000
    assert w.of_type("download_progress")[-1]["eta_seconds"] == 0.0

    paths = CachePaths(cache, repo)
    assert paths.ref("main").read_text() == info.commit
    for f in finished["files"]:
        link = Path(f["snapshot_path"])
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert link.resolve() == Path(f["blob_path"]) == paths.blob(f["sha256"])
        assert hashlib.sha256(link.read_bytes()).hexdigest() == f["sha256"]
    assert not list(paths.blobs_dir.glob("*.incomplete"))
    (cached,) = scan_cache_dir(cache).repos
    assert cached.repo_id == repo and cached.nb_files == 3 and cached.size_on_disk == 5_300_000
    assert {r.commit_hash for r in cached.revisions} == {info.commit}
    # huggingface_hub (and so llama.cpp) finds the files offline
    local = hf_hub_download(repo, "mmproj-m-F16.gguf", cache_dir=cache, local_files_only=True)
    assert Path(local) == paths.snapshot(info.commit, "mmproj-m-F16.gguf")

    hub.reset_stats()
    again = spawn_download(spec, cache)
    assert again.wait() == 0
    assert again.of_type("download_started")[0]["resumed_bytes"] == 5_300_000
    assert again.of_type("download_finished")[0]["bytes_transferred"] == 0
    assert hub.stats()["total_bytes_served"] == 0


# --- resume ----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_connection_drop_at_40_percent_resumes(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    size = 8 * MB
    repo, _ = _repo(hub, {"m-Q4_K_M.gguf": size})
    hub.set_faults({"kind": "drop", "repo": repo, "path": "m-Q4_K_M.gguf", "at_fraction": 0.4})
    w = spawn_download(_spec(hub, repo), tmp_path / "hub")
    assert w.wait() == 0, w.stderr()
    assert "download_retry" in w.stderr()
    served = hub.bytes_served(repo, "m-Q4_K_M.gguf")
    assert size <= served <= 1.05 * size
    ranges = [r["range"] for r in hub.stats()["requests"] if r["method"] == "GET" and r["file"]]
    assert ranges[0] is None and ranges[1].startswith("bytes=") and int(ranges[1][6:-1]) > 0.3 * size


@pytest.mark.timeout(60)
def test_kill9_at_half_then_new_worker_resumes(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    size = 8 * MB
    repo, info = _repo(hub, {"m-Q4_K_M.gguf": size})
    sha = info.files[0].sha256
    spec, cache = _spec(hub, repo), tmp_path / "hub"
    hub.set_faults({"kind": "throttle", "repo": repo, "rate": 4 * MB, "times": 1})
    first = spawn_download(spec, cache)
    first.wait_until(lambda: _partial_size(cache, repo, sha) >= size // 2, what="50% on disk")
    first.proc.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    kept = _partial_size(cache, repo, sha)
    assert size // 2 <= kept < size

    second = spawn_download(spec, cache)
    assert second.wait() == 0, second.stderr()
    assert second.of_type("download_started")[0]["resumed_bytes"] == kept
    assert second.of_type("download_finished")[0]["bytes_transferred"] == size - kept
    assert hub.bytes_served(repo, "m-Q4_K_M.gguf") <= 1.05 * size
    assert hashlib.sha256(CachePaths(cache, repo).blob(sha).read_bytes()).hexdigest() == sha


@pytest.mark.timeout(60)
def test_stall_and_server_error_are_retried(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    repo, _ = _repo(hub, {"m-Q4_K_M.gguf": 2 * MB})
    hub.set_faults(
        {"kind": "status", "repo": repo, "status": 503, "methods": ["GET"]},
        {"kind": "stall", "repo": repo, "at_fraction": 0.2, "seconds": 30},
    )
    w = spawn_download(_spec(hub, repo), tmp_path / "hub", "--stall-timeout", "0.5")
    assert w.wait() == 0, w.stderr()
    assert "stalled" in w.stderr() and "HTTP 503" in w.stderr()
    assert hub.stats()["get_requests"][f"{repo}/m-Q4_K_M.gguf"] == 3


@pytest.mark.timeout(60)
def test_persistent_network_failure_gives_up(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    repo, _ = _repo(hub, {"m-Q4_K_M.gguf": 1000})
    hub.set_faults({"kind": "status", "repo": repo, "status": 500, "times": None})
    w = spawn_download(_spec(hub, repo), tmp_path / "hub", "--max-retries", "2")
    assert w.wait() == 1
    failed = w.of_type("download_failed")[0]
    assert (failed["reason"], failed["retryable"]) == ("network", True) and "3 attempts" in failed["message"]


# --- cancel and parent death ---------------------------------------------------------


@pytest.mark.timeout(60)
def test_cancel_at_30_percent_keeps_partial_and_discard_deletes_it(
    hub: HubServer, spawn_download: Spawn, tmp_path: Path
) -> None:
    size = 8 * MB
    repo, info = _repo(hub, {"m-Q4_K_M.gguf": size})
    sha, spec, cache = info.files[0].sha256, _spec(hub, repo), tmp_path / "hub"
    # Every response stalls at 50 %: only the cancel can end these jobs, however slow we are.
    hub.set_faults(
        {"kind": "throttle", "repo": repo, "rate": 3 * MB},
        {"kind": "stall", "repo": repo, "at_fraction": 0.5, "times": None},
    )
    w = spawn_download(spec, cache)
    w.wait_until(lambda: _partial_size(cache, repo, sha) >= 0.3 * size, what="30%")
    w.proc.send_signal(signal.SIGTERM)
    cancelled = w.wait_event("download_cancelled", timeout=30)  # how fast: bench/reaction.py
    assert w.wait(timeout=30) == 2
    kept = _partial_size(cache, repo, sha)
    assert cancelled == {"job_id": w.job_id, "discarded": False, "bytes_on_disk": kept} and kept >= 0.3 * size

    again = spawn_download(spec, cache)
    again.wait_event("download_started")  # its handlers are installed by then
    again.proc.send_signal(signal.SIGUSR1)
    discarded = again.wait_event("download_cancelled", timeout=30)
    assert again.wait(timeout=30) == 2
    assert again.of_type("download_started")[0]["resumed_bytes"] == kept
    assert discarded["discarded"] is True and discarded["bytes_on_disk"] == 0
    assert not CachePaths(cache, repo).incomplete(sha).exists()


@pytest.mark.timeout(200)
def test_cancel_during_a_stall_is_prompt(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    """Cancelled right as the stall starts, again and again: a signal landing just before the
    worker's read blocks must still cut that read short (tests/workers/runtime/test_signals.py pins the
    mechanism). --stall-timeout 3600 turns any lost signal into a hang, which the timeouts catch."""
    size = 2 * MB
    repo, info = _repo(hub, {"m-Q4_K_M.gguf": size})
    hub.set_faults({"kind": "stall", "repo": repo, "at_fraction": 0.3, "seconds": 3600, "times": None})
    for round_, sig in enumerate((signal.SIGTERM, signal.SIGUSR1, signal.SIGTERM)):
        cache = tmp_path / f"hub{round_}"
        w = spawn_download(_spec(hub, repo), cache, "--stall-timeout", "3600")
        w.wait_until(lambda c=cache: _partial_size(c, repo, info.files[0].sha256) >= int(0.3 * size), what="stall")
        w.proc.send_signal(sig)
        assert w.wait(timeout=60) == 2  # how fast: bench/reaction.py
        assert w.types()[-1] == "download_cancelled"


@pytest.mark.timeout(60)
def test_parent_death_stops_worker_silently(hub: HubServer, tmp_path: Path) -> None:
    size = 8 * MB
    repo, info = _repo(hub, {"m-Q4_K_M.gguf": size})
    cache, events, err = tmp_path / "hub", tmp_path / "ev.jsonl", tmp_path / "err.log"
    hub.set_faults(  # stalls at 50 %: the worker cannot finish before its parent's death is noticed
        {"kind": "throttle", "repo": repo, "rate": 2 * MB},
        {"kind": "stall", "repo": repo, "at_fraction": 0.5, "times": None},
    )
    launcher = "import subprocess, sys; subprocess.Popen(sys.argv[1:]).wait()"
    cmd = [sys.executable, "-c", launcher, *download_command(_spec(hub, repo), cache, events, "orphan")]
    with err.open("wb") as errf:
        parent = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=errf, cwd=REPO_ROOT, env=worker_env())
    try:
        deadline = time.monotonic() + 20
        while not any(t == "download_progress" for t, _ in read_jsonl(events)):
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.01)
        worker = psutil.Process(read_jsonl(events)[0][1]["pid"])
        parent.kill()
        parent.wait()
        assert not still_running([worker], timeout=30), "worker outlived its parent"  # how fast: bench/reaction.py
    finally:
        if parent.poll() is None:
            parent.kill()
    assert [t for t, _ in read_jsonl(events)][-1] == "download_progress"  # no cancelled/failed: silent
    assert "parent_exited" in err.read_text()
    assert _partial_size(cache, repo, info.files[0].sha256) > 0


# --- failures ------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_wrong_bytes_fail_checksum_and_publish_nothing(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    repo, _ = _repo(hub, {"m-Q4_K_M.gguf": 3 * MB})
    hub.set_faults({"kind": "corrupt", "repo": repo, "at_fraction": 0.5})
    cache = tmp_path / "hub"
    w = spawn_download(_spec(hub, repo), cache)
    assert w.wait() == 1
    failed = w.of_type("download_failed")[0]
    assert failed["reason"] == "checksum_mismatch" and failed["retryable"] is True
    paths = CachePaths(cache, repo)
    assert list(paths.blobs_dir.iterdir()) == []  # neither blob nor partial
    assert not (paths.repo_dir / "snapshots").exists() and not paths.ref("main").exists()


@pytest.mark.timeout(60)
def test_http_errors_are_not_retried(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    repo, _ = _repo(hub, {"m-Q4_K_M.gguf": 1000})
    hub.set_faults({"kind": "status", "repo": repo, "status": 404, "error_code": "EntryNotFound", "times": None})
    w = spawn_download(_spec(hub, repo), tmp_path / "a")
    assert w.wait() == 1
    assert w.of_type("download_failed")[0]["reason"] == "not_found"
    assert hub.stats()["get_requests"][f"{repo}/m-Q4_K_M.gguf"] == 1

    gated, _ = _repo(hub, {"g-Q4_K_M.gguf": 1000}, gated=True, token="hf_good")
    spec = _spec(hub, gated, token="hf_good")
    w = spawn_download(spec, tmp_path / "b")
    assert w.wait() == 1
    assert w.of_type("download_failed")[0] | {"message": ""} == {
        "job_id": w.job_id,
        "reason": "unauthorized",
        "message": "",
        "retryable": False,
    }
    ok = spawn_download(spec, tmp_path / "b", env=worker_env(HF_TOKEN="hf_good"))
    assert ok.wait() == 0, ok.stderr()


@pytest.mark.timeout(60)
def test_file_size_limit_reports_disk_full_and_keeps_partial(
    hub: HubServer, spawn_download: Spawn, tmp_path: Path
) -> None:
    repo, info = _repo(hub, {"m-Q4_K_M.gguf": 4 * MB})
    cache, limit = tmp_path / "hub", 1 << 20

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    w = spawn_download(_spec(hub, repo), cache, preexec_fn=small_files)
    assert w.wait() == 1, w.stderr()
    failed = w.of_type("download_failed")[0]
    assert failed["reason"] == "disk_full" and failed["retryable"] is False, failed
    assert _partial_size(cache, repo, info.files[0].sha256) == limit


@pytest.mark.timeout(30)
def test_not_enough_free_space_fails_before_starting(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    spec = {
        "repo": "u/huge",
        "revision": "main",
        "commit": "c" * 40,
        "endpoint": hub.url,
        "files": [{"path": "huge.gguf", "size": 1 << 60, "sha256": "d" * 64}],
    }
    w = spawn_download(spec, tmp_path / "hub")
    assert w.wait() == 1
    assert w.types() == ["download_failed"]
    failed = w.of_type("download_failed")[0]
    assert failed["reason"] == "disk_full" and str(1 << 60) in failed["message"] and "free" in failed["message"]
    assert hub.stats()["requests"] == []


@pytest.mark.timeout(30)
def test_blob_locked_by_another_process_fails_fast(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    repo, info = _repo(hub, {"m-Q4_K_M.gguf": 1000})
    cache = tmp_path / "hub"
    lock = CachePaths(cache, repo).lock(info.files[0].sha256)
    lock.parent.mkdir(parents=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        w = spawn_download(_spec(hub, repo), cache)
        assert w.wait(timeout=10) == 1
    failed = w.of_type("download_failed")[0]
    assert failed["reason"] == "internal" and "lock held" in failed["message"]


@pytest.mark.timeout(30)
def test_bad_spec_and_usage(spawn_download: Spawn, tmp_path: Path) -> None:
    w = spawn_download('{"repo": "u/r", "commit": "xyz", "files": []}', tmp_path / "hub")
    assert w.wait() == 1 and w.of_type("download_failed")[0]["reason"] == "internal"
    usage = subprocess.run(
        [sys.executable, "-m", "workers.download"],
        cwd=REPO_ROOT,
        env=worker_env(),
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    assert usage.returncode == 64


# --- progress throttle ----------------------------------------------------------------


@pytest.mark.timeout(60)
def test_progress_is_throttled_and_reaches_100(hub: HubServer, spawn_download: Spawn, tmp_path: Path) -> None:
    size = 50 * MB
    repo, _ = _repo(hub, {"m-Q4_K_M.gguf": size})
    w = spawn_download(_spec(hub, repo), tmp_path / "hub", "--no-fsync")
    assert w.wait() == 0, w.stderr()
    progress = w.of_type("download_progress")
    duration = w.of_type("download_finished")[0]["duration_ms"] / 1000
    assert 1 <= len(progress) <= int(duration / 0.5) + 2  # first + one per 0.5 s + the forced final
    done = [p["bytes_done"] for p in progress]
    assert done == sorted(done) and done[-1] == size and progress[-1]["bytes_total"] == size


def test_progress_meter_throttles_with_a_fake_clock() -> None:
    now = [0.0]
    sent: list[dict[str, Any]] = []
    meter = ProgressMeter(total=1000, done=100, emit=sent.append, clock=lambda: now[0])
    for _ in range(900):  # one byte per 10 ms: 9 s in all
        now[0] += 0.01
        meter.add(1)
    meter.finish()
    assert sent[0]["bytes_done"] == 101 and sent[-1]["bytes_done"] == 1000 and sent[-1]["eta_seconds"] == 0.0
    assert len(sent) <= 9 / 0.5 + 2
    assert sent[-2]["bytes_per_second"] == pytest.approx(100.0, rel=0.05)
    json.dumps(sent)  # payloads are plain JSON


@pytest.mark.timeout(60)
def test_events_go_to_the_event_store_with_db(hub: HubServer, tmp_path: Path, db_path: Path) -> None:
    from service.event_store.sync_store import SyncEventStore

    repo, info = _repo(hub, {"m-Q4_K_M.gguf": 100_000})
    cmd = download_command(_spec(hub, repo), tmp_path / "hub", tmp_path / "unused.jsonl", "db-job")
    cmd[cmd.index("--events") : cmd.index("--events") + 2] = ["--db", str(db_path)]
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=worker_env(), stdin=subprocess.DEVNULL, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    store = SyncEventStore(db_path, source={"kind": "test"})
    try:
        recorded = store.read()
    finally:
        store.close()
    types = [r.event.TYPE for r in recorded]
    assert types[0] == "download_started" and types[-1] == "download_finished"
    assert {r.model for r in recorded} == {"test/model"}
    assert recorded[-1].event.commit == info.commit  # type: ignore[attr-defined]
