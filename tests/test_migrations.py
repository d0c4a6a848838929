"""Alembic: upgrade an empty database, and no drift between models and migrations."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory

import migrations
from devtools.postgres_server import PostgresServer
from service.recovery.migrate import alembic_config, at_head, upgrade

ROOT = Path(__file__).resolve().parents[1]


def _alembic(db: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    env = {**os.environ, "MODELROUTER_DATABASE_URL": url}
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


def test_the_service_migrates_without_alembic_ini_from_any_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime builds its Alembic config in code (a wheel install has no alembic.ini)."""
    cfg = alembic_config()
    assert cfg.config_file_name is None
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "nested" / "service.db"
    upgrade(db)
    with sqlite3.connect(db) as conn:
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version == ScriptDirectory.from_config(cfg).get_current_head()


def test_postgres_upgrade_check_downgrade_and_upgrade_again(pg_server: PostgresServer) -> None:
    """The same migrations on PostgreSQL: no drift from the models, and a clean round trip."""
    url = pg_server.create_database("migrations_round_trip")
    for args in (("upgrade", "head"), ("check",), ("downgrade", "base"), ("upgrade", "head")):
        done = _alembic(url, *args)
        assert done.returncode == 0, f"alembic {' '.join(args)}: {done.stdout}{done.stderr}"
        if args == ("check",):
            assert "No new upgrade operations detected" in done.stdout + done.stderr
    with psycopg.connect(url) as conn:
        names = {r[0] for r in conn.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
        kinds = conn.execute(
            "SELECT data_type FROM information_schema.columns WHERE column_name = 'position' AND table_name = 'events'"
        ).fetchall()
    assert names == {"events_no_update", "events_no_delete", "events_no_truncate"}
    assert kinds == [("bigint",)]


def test_head_is_alembics_head_and_a_log_at_head_is_left_alone(tmp_path: Path) -> None:
    """``migrations.HEAD`` (what a start checks without loading Alembic) is Alembic's own head,
    a log at it is not migrated again, and one at another revision still is."""
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == migrations.HEAD
    db = tmp_path / "log.db"
    assert not at_head(db)
    upgrade(db)
    assert at_head(db)
    assert _alembic(db, "downgrade", "-1").returncode == 0
    assert not at_head(db)
    upgrade(db)
    assert at_head(db)
    with sqlite3.connect(db) as conn:
        assert {"events", "snapshots"} <= {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
