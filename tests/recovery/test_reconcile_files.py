"""Start-up reconciliation of processes and files: surviving workers, orphan partials, gc; on SQLite
and on PostgreSQL (``log_backend``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from tests.conftest_hub import unique_repo
from tests.recovery.conftest import LogBackend
from tests.service_probes import events, still_running

MB = 1024 * 1024


@pytest.mark.timeout(90)
def test_a_surviving_download_worker_is_identified_and_terminated(
    hub: HubServer, tmp_path: Path, log_backend: LogBackend
) -> None:
    """A SIGSTOPped worker does not act on its parent-death signal, so it outlives
    a kill -9 of the service; the next start must find it by pid + start time +
    job id, terminate it, and resume the job with a worker of its own."""
    repo = unique_repo("survivor")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 16 * MB})
    # The first response stalls at 50 %: the worker is still downloading when stopped, however slow we are.
    hub.set_faults(
        {"kind": "throttle", "repo": repo, "rate": 4 * MB, "times": 1},
        {"kind": "stall", "repo": repo, "at_fraction": 0.5},
    )
    home, env = tmp_path / "home", {"HF_ENDPOINT": hub.url}
    svc = ServiceProcess(home, env=env, args=log_backend.args).start()
    job_id = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30).json()["job_id"]
    deadline = time.monotonic() + 30
    while (job := httpx.get(f"{svc.url}/downloads/{job_id}").json())["bytes_done"] < 2 * MB:
        assert time.monotonic() < deadline, job
        time.sleep(0.02)
    survivor = psutil.Process(job["pid"])
    os.kill(survivor.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while survivor.status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, survivor.status()
        time.sleep(0.01)
    svc.kill9()
    # Stopped, it cannot act on the parent-death signal now pending: it stays until continued or killed.
    assert still_running([survivor], 0) == [survivor], "the stopped worker should have survived"
    svc = ServiceProcess(home, env=env, port=svc.port, args=log_backend.args).start(timeout=60)
    try:
        assert still_running([survivor], 30) == [], "the survivor must be terminated"
        interrupted = events(svc, type="download_interrupted")
        assert [e["data"]["job_id"] for e in interrupted] == [job_id]
        assert interrupted[0]["data"]["bytes_on_disk"] >= 2 * MB
        deadline = time.monotonic() + 30
        while httpx.get(f"{svc.url}/downloads/{job_id}").json()["status"] != "finished" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{svc.url}/downloads/{job_id}").json()["status"] == "finished"
        assert [e["type"] for e in events(svc, type="download_resumed")] == ["download_resumed"]
    finally:
        svc.stop()


@pytest.mark.timeout(60)
def test_orphan_partials_are_reported_then_collected_by_gc(
    hub: HubServer, tmp_path: Path, log_backend: LogBackend
) -> None:
    home = tmp_path / "home"
    env = {"HF_ENDPOINT": hub.url}
    # A cancelled job's partial is referenced (a later request resumes it) ...
    repo = unique_repo("kept")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 16 * MB})
    hub.set_faults(  # stalls at 50 %: still running when cancelled, however slow we are
        {"kind": "throttle", "repo": repo, "rate": 4 * MB},
        {"kind": "stall", "repo": repo, "at_fraction": 0.5, "times": None},
    )
    with ServiceProcess(home, env=env, args=log_backend.args) as svc:
        job_id = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30).json()["job_id"]
        deadline = time.monotonic() + 30
        while httpx.get(f"{svc.url}/downloads/{job_id}").json()["bytes_done"] < MB:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert httpx.delete(f"{svc.url}/downloads/{job_id}", timeout=30).json()["status"] == "cancelled"
    kept = next((home / "hub").rglob("*.incomplete"))
    # ... a partial nobody asked for is an orphan.
    orphan = home / "hub" / "models--someone--else" / "blobs" / ("ab" * 32 + ".incomplete")
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"x" * 1000)
    with ServiceProcess(home, env=env, args=log_backend.args) as svc:
        found = events(svc, type="partial_file_found")
        assert [(e["data"]["path"], e["data"]["bytes"]) for e in found] == [(str(orphan), 1000)]
        assert events(svc, type="recovery_completed")[-1]["data"]["orphans"] == 1
    dry = subprocess.run(
        [sys.executable, "-m", "service.cli", "gc", "--home", str(home), *log_backend.args, "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "would delete" in dry.stdout and orphan.exists()
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "gc", "--home", str(home), *log_backend.args],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "1 orphan partial file(s), 1000 bytes deleted" in done.stdout
    assert not orphan.exists() and kept.exists()
    with ServiceProcess(home, env=env, args=log_backend.args) as svc:
        assert [e["data"]["path"] for e in events(svc, type="partial_file_removed")] == [str(orphan)]
        assert len(events(svc, type="partial_file_found")) == 1, "nothing new to report"
