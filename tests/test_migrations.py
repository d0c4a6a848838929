"""Alembic: upgrade an empty database, and no drift between models and migrations."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _alembic(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MODELROUTER_DATABASE_URL": f"sqlite:///{db}"}
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def test_upgrade_head_on_empty_database_then_check_finds_no_drift(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    upgraded = _alembic(db, "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','trigger')")}
        assert {"events", "snapshots", "events_no_update", "events_no_delete", "alembic_version"} <= tables
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    checked = _alembic(db, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr


def test_downgrade_and_upgrade_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "rt.db"
    assert _alembic(db, "upgrade", "head").returncode == 0
    assert _alembic(db, "downgrade", "base").returncode == 0
    assert _alembic(db, "upgrade", "head").returncode == 0
