"""Kill -9 the real service at awkward moments, restart it, lose nothing. Every test runs on SQLite
and on PostgreSQL (``log_backend``) but the three-writer kill, which checks SQLite's WAL itself."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.conftest_hub import unique_repo
from tests.recovery.conftest import LogBackend
from tests.service_probes import events, inference_children, model_entry, still_running, wait_for_event

MB = 1024 * 1024


def _all_event_ids(svc: ServiceProcess) -> set[str]:
    return {e["id"] for e in events(svc)}


def _workers(kind: str, marker: str | None = None) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if (
                f"workers.{kind}" in cmd
                and (marker is None or marker in cmd)
                and proc.info["status"] != psutil.STATUS_ZOMBIE
            ):
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def _stable(entries: list[dict[str, Any]], live: set[str]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in live} for e in entries]


@pytest.mark.timeout(240)
def test_kill9_during_a_download_ten_times_then_it_completes(
    hub: HubServer, tmp_path: Path, log_backend: LogBackend
) -> None:
    repo = unique_repo("crashy")
    size = 48 * MB
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": size})
    # Every response stalls at 75 % until released, so all ten kills land mid-download
    # however slow this machine is.
    hub.set_faults(
        {"kind": "throttle", "repo": repo, "rate": 8 * MB},
        {"kind": "stall", "repo": repo, "at_fraction": 0.75, "times": None},
    )
    home = tmp_path / "home"
    env = {"HF_ENDPOINT": hub.url}
    rng = random.Random(7)
    svc = ServiceProcess(home, env=env, args=log_backend.args).start()
    try:
        job_id = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30).json()["job_id"]
        for _ in range(10):
            time.sleep(rng.uniform(0.05, 0.45))  # a random moment to kill at, not a wait for anything
            acknowledged = _all_event_ids(svc)
            svc.kill9()
            assert still_running(_workers("download", job_id), 30) == [], "orphaned download worker"
            svc = ServiceProcess(home, env=env, port=svc.port, args=log_backend.args).start()
            assert acknowledged <= _all_event_ids(svc), "an acknowledged event was lost"
            job = httpx.get(f"{svc.url}/downloads/{job_id}").json()
            assert job["status"] in {"running", "queued"}, job
    except BaseException:
        svc.kill9()
        raise
    served = hub.bytes_served(repo, "m-Q4_K_M.gguf")
    hub.reset()  # no more faults; the stalled response ends and the worker resumes after it
    try:
        deadline = time.monotonic() + 120
        while httpx.get(f"{svc.url}/downloads/{job_id}").json()["status"] != "finished" and time.monotonic() < deadline:
            time.sleep(0.05)
        job = httpx.get(f"{svc.url}/downloads/{job_id}").json()
        assert job["status"] == "finished"
        interrupted = events(svc, type="download_interrupted")
        assert len(interrupted) >= 9  # a kill before the worker recorded anything may still count
        assert served + hub.bytes_served(repo, "m-Q4_K_M.gguf") <= 1.1 * size
        verified = subprocess.run(
            [sys.executable, "-m", "service.cli", "verify", "--home", str(home), *log_backend.args, "--deep"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert model_entry(svc, f"{repo}:Q4_K_M")["status"]["value"] == "unloaded"
    finally:
        svc.stop()


@pytest.mark.timeout(120)
def test_kill9_with_models_loaded_and_loading(tmp_path: Path, log_backend: LogBackend) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_gguf(models / "tiny-a.gguf", seed=1)
    write_tiny_gguf(models / "tiny-b.gguf", seed=2)
    presets = tmp_path / "presets.ini"
    presets.write_text("[tiny-b]\nload-on-startup = true\n")
    env = {"MODELROUTER_MODELS_DIR": str(models), "MODELROUTER_PRESETS": str(presets)}
    home = tmp_path / "home"
    svc = ServiceProcess(home, env=env, args=log_backend.args).start()
    wait_for_event(svc, "instance_ready", model="tiny-b")
    chat = {"model": "tiny-a", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    assert httpx.post(f"{svc.url}/v1/chat/completions", json=chat, timeout=30).status_code == 200
    workers = inference_children(svc)
    assert len(workers) == 2
    svc.kill9()
    assert still_running(workers, 30) == [], "orphaned inference workers"
    svc = ServiceProcess(home, env=env, port=svc.port, args=log_backend.args).start()
    try:
        lost = {e["model"]: e for e in events(svc, type="instance_lost")}
        assert set(lost) == {"tiny-a", "tiny-b"} and lost["tiny-a"]["data"]["reason"] == "router_restart"
        assert model_entry(svc, "tiny-a")["status"]["value"] == "unloaded"
        wait_for_event(svc, "recovery_completed")
        deadline = time.monotonic() + 60
        while model_entry(svc, "tiny-b")["status"]["value"] != "loaded" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert model_entry(svc, "tiny-b")["status"]["value"] == "loaded", "load-on-startup model is back"
        completed = events(svc, type="recovery_completed")[-1]["data"]
        assert completed["lost_instances"] == 2
    finally:
        svc.stop()


def _collect_acks(proc: subprocess.Popen[str], acks: list[str]) -> None:
    assert proc.stdout is not None
    acks.extend(line for line in proc.stdout if line.startswith("ACK"))  # until the writer dies


@pytest.mark.timeout(180)
def test_kill9_during_appends_from_three_workers_and_the_service(tmp_path: Path) -> None:
    home = tmp_path / "home"
    svc = ServiceProcess(home).start()
    db = home / "modelrouter.db"
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.event_store.writer_process",
                "--db",
                str(db),
                "--writer",
                str(w),
                "--batches",
                "100000",
                "--batch-size",
                "5",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(3)
    ]
    acks: list[list[str]] = [[] for _ in writers]
    readers = [
        threading.Thread(target=_collect_acks, args=(p, a), daemon=True) for p, a in zip(writers, acks, strict=True)
    ]
    for reader in readers:
        reader.start()
    # The signal, not a guess at how fast this machine is: every writer has had 10 batches acknowledged.
    deadline = time.monotonic() + 90
    while any(len(a) < 10 for a in acks):
        assert all(p.poll() is None for p in writers), "a writer died before the kill"
        assert time.monotonic() < deadline, f"writers never got going: {[len(a) for a in acks]} batches acknowledged"
        time.sleep(0.01)
    svc.kill9()
    for proc in writers:
        proc.send_signal(signal.SIGKILL)
    for proc, reader in zip(writers, readers, strict=True):
        proc.wait()
        reader.join()
    acked = {i for lines in acks for line in lines for i in line.split()[3].split(",")}
    assert len(acked) >= 3 * 10 * 5
    assert Path(str(db) + "-wal").exists(), "the kill should leave a WAL behind"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        positions = [r[0] for r in conn.execute("SELECT position FROM events ORDER BY position")]
        ids = {r[0] for r in conn.execute("SELECT event_id FROM events")}
    assert positions == list(range(1, len(positions) + 1)), "gap in positions"
    assert acked <= ids
    svc = ServiceProcess(home, port=svc.port).start()
    try:
        assert svc.wait_healthy()["position"] >= len(positions)
    finally:
        svc.stop()


@pytest.mark.timeout(120)
def test_state_after_restart_equals_state_before_kill(hub: HubServer, tmp_path: Path, log_backend: LogBackend) -> None:
    good, bad, slow = unique_repo("good"), unique_repo("bad"), unique_repo("slow")
    make_repo(hub.root, good, {"m-Q4_K_M.gguf": 2 * MB})
    make_repo(hub.root, bad, {"m-Q4_K_M.gguf": 2 * MB})
    make_repo(hub.root, slow, {"m-Q4_K_M.gguf": 32 * MB})
    hub.set_faults(
        {"kind": "corrupt", "repo": bad, "at_fraction": 0.5, "times": None},
        {"kind": "throttle", "repo": slow, "rate": 2 * MB},
        {
            "kind": "stall",
            "repo": slow,
            "at_fraction": 0.5,
            "times": None,
        },  # running when cancelled, however slow we are
    )
    home = tmp_path / "home"
    env = {"HF_ENDPOINT": hub.url, "MODELROUTER_RESUME_DOWNLOADS_ON_START": "false"}
    svc = ServiceProcess(home, env=env, args=log_backend.args).start()
    jobs = [httpx.post(f"{svc.url}/models", json={"model": r}, timeout=30).json()["job_id"] for r in (good, bad, slow)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        statuses = [httpx.get(f"{svc.url}/downloads/{j}").json()["status"] for j in jobs[:2]]
        if statuses == ["finished", "failed"]:
            break
        time.sleep(0.05)
    assert statuses == ["finished", "failed"]
    assert httpx.delete(f"{svc.url}/downloads/{jobs[2]}", timeout=10).json()["status"] == "cancelled"
    live = {"bytes_per_second", "eta_seconds", "pid"}
    before_models = httpx.get(f"{svc.url}/models").json()["data"]
    before_jobs = httpx.get(f"{svc.url}/downloads").json()["downloads"]
    svc.kill9()
    svc = ServiceProcess(home, env=env, port=svc.port, args=log_backend.args).start()
    try:
        assert httpx.get(f"{svc.url}/models").json()["data"] == before_models
        assert _stable(httpx.get(f"{svc.url}/downloads").json()["downloads"], live) == _stable(before_jobs, live)
    finally:
        svc.stop()
