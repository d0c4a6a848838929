"""docs/operations.md's backup recipe, done to a running service: ``VACUUM INTO``
and SQLite's online backup (what the shell's ``.backup`` uses) copy the log while
the service and an inference worker append to it; each copy verifies, and a
service started on it serves, closing what the copy caught mid-way
(``instance_lost``) as after a crash."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from devtools.service_process import ServiceProcess
from service.recovery.verify import verify
from tests.e2e.conftest import models_dir
from tests.service_probes import events, model_entry, wait_for_event

__all__ = ["models_dir"]
CHAT = {"model": "tiny-a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _vacuum_into(db: Path, target: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("VACUUM INTO ?", (str(target),))


def _online_backup(db: Path, target: Path) -> None:
    with sqlite3.connect(db) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("copy", [_vacuum_into, _online_backup], ids=["vacuum_into", "backup"])
def test_a_copy_taken_while_serving_verifies_and_serves(
    copy: Callable[[Path, Path], None], models_dir: Path, tmp_path: Path
) -> None:
    env = {"MODELROUTER_MODELS_DIR": str(models_dir)}
    with ServiceProcess(tmp_path / "live", env=env) as svc:
        assert httpx.post(f"{svc.url}/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
        # Appends go on (request_completed per chat) while the copy is taken.
        chats = threading.Thread(
            target=lambda: [httpx.post(f"{svc.url}/v1/chat/completions", json=CHAT, timeout=60) for _ in range(5)]
        )
        chats.start()
        restored = tmp_path / "restored"
        restored.mkdir()
        copy(svc.home / "modelrouter.db", restored / "modelrouter.db")
        chats.join()
        live_ids = [e["id"] for e in events(svc)]

    report = verify(restored / "modelrouter.db", deep=False)
    assert report.ok, report.render()
    with sqlite3.connect(restored / "modelrouter.db") as conn:
        copied_ids = [row[0] for row in conn.execute("SELECT event_id FROM events ORDER BY position")]
    assert copied_ids == live_ids[: len(copied_ids)], "the copy is a prefix of the log: consistent, nothing torn"

    with ServiceProcess(restored, env=env) as again:
        lost = wait_for_event(again, "instance_lost", model="tiny-a")
        assert lost["data"]["reason"] == "router_restart"
        assert model_entry(again, "tiny-a")["status"]["value"] == "unloaded"
        assert httpx.post(f"{again.url}/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
