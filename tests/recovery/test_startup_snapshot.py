"""The running service snapshots its fold and starts from the snapshot (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx

from devtools.service_process import ServiceProcess
from service.event_store.codec import new_event
from service.event_store.sync_store import SyncEventStore
from service.recovery.migrate import upgrade
from service.supervision.ports import free_port
from tests.eventually import eventually
from tests.recovery.conftest import LogBackend
from tests.service_probes import events


def test_restart_starts_from_the_snapshot_taken_at_shutdown(tmp_path: Path, log_backend: LogBackend) -> None:
    home = tmp_path / "home"
    with ServiceProcess(home, env={"MODELROUTER_SNAPSHOT_EVERY": "100"}, args=log_backend.args) as svc:
        store = SyncEventStore(log_backend.location(home), source={"kind": "test"})
        for i in range(3):
            store.append(
                [
                    new_event(
                        "download_requested",
                        {"job_id": f"j{i}", "repo": "org/r", "commit": "c" * 40, "files": [], "total_bytes": 10},
                        model=f"org/r{i}:Q8_0",
                    )
                ]
            )
            store.append(
                [
                    new_event(
                        "download_progress",
                        {"job_id": f"j{i}", "bytes_done": n, "bytes_total": 10},
                        model=f"org/r{i}:Q8_0",
                    )
                    for n in range(60)
                ]
            )
            store.append(
                [
                    new_event(
                        "download_failed",
                        {"job_id": f"j{i}", "reason": "network", "message": "x", "retryable": True},
                        model=f"org/r{i}:Q8_0",
                    )
                ]
            )
        head = store.head()  # the log's end, not the service's position: it may not have folded it yet
        store.close()
        eventually(lambda: svc.wait_healthy()["position"] >= head, "the service folding every appended event")
        before = httpx.get(f"{svc.url}/downloads").json(), httpx.get(f"{svc.url}/models").json()
    with ServiceProcess(home, port=svc.port, args=log_backend.args) as svc:
        completed = events(svc, type="recovery_completed")[-1]["data"]
        assert completed["snapshot_position"] >= head
        assert completed["events_replayed"] < 5, completed
        assert (httpx.get(f"{svc.url}/downloads").json(), httpx.get(f"{svc.url}/models").json()) == before


def test_a_damaged_log_refuses_to_serve_with_quick_checks_verdict(tmp_path: Path) -> None:
    """``PRAGMA quick_check`` runs beside the fold's rebuild (startup._rebuild_checked): a damaged
    file still stops the start, and its verdict is what the user reads, not the rebuild's error."""
    home = tmp_path / "home"
    db = home / "modelrouter.db"
    home.mkdir()
    upgrade(db)
    store = SyncEventStore(db, source={"kind": "test"})
    store.append(
        [
            new_event(
                "download_requested",
                {"job_id": f"j{i}", "repo": "org/r", "commit": "c" * 40, "files": [], "total_bytes": 10},
                model=f"org/r{i}:Q8_0",
            )
            for i in range(3000)
        ]
    )
    store.close()
    with sqlite3.connect(db) as conn:
        page_size, pages = (
            conn.execute("PRAGMA page_size").fetchone()[0],
            conn.execute("PRAGMA page_count").fetchone()[0],
        )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with db.open("r+b") as file:  # a page in the middle of the events' table: garbage
        file.seek(page_size * (pages // 2))
        file.write(b"\xa5" * page_size)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODELROUTER_"))}
    serve = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--home", str(home), "--port", str(free_port())],
        env={**env, "HF_HOME": str(tmp_path / "hf")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert serve.returncode != 0
    assert "failed PRAGMA quick_check" in serve.stdout + serve.stderr, serve.stdout + serve.stderr
