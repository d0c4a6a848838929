"""Run Alembic migrations from code: the service calls this before serving.

Alembic is imported only when a migration may run: a SQLite log already at
:data:`migrations.HEAD` is seen with one query, and every start of an existing
log skips Alembic's ~0.1 s of imports and its script directory.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text

import migrations
from service.event_store.engines import sync_engine, sync_engine_for
from service.event_store.urls import is_postgres, sqlite_path

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATION_LOCK = 0x6D6F_6465_6C6D_6967  # "modelmig": nodes starting at once migrate one at a time


def alembic_config(url: str | None = None) -> Config:
    """Alembic's config built in code, pointing at the installed ``migrations`` package.

    Neither ``alembic.ini`` nor the cwd matters, so a wheel install migrates too.
    """
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).resolve().parent))
    cfg.set_main_option("path_separator", "os")
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def upgrade(db_path: Path) -> None:
    """``alembic upgrade head`` on the SQLite file ``db_path`` (created if missing)."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if not at_head(db_path):
        _upgrade(sync_engine(db_path, write=False))


def at_head(db_path: Path) -> bool:
    """Whether the SQLite file ``db_path`` exists and is stamped with :data:`migrations.HEAD`
    (read only: a missing or unreadable file, or another revision, is for Alembic)."""
    if not db_path.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrations.HEAD,)]
    except sqlite3.Error:
        return False


def upgrade_url(url: str) -> None:
    """``alembic upgrade head`` on the database ``url`` names: a SQLite URL as :func:`upgrade`;
    on PostgreSQL the database must exist, and the DDL runs in one transaction under an
    advisory lock, so two services starting at once do not both create the tables."""
    if not is_postgres(url):
        upgrade(sqlite_path(url))
        return
    _upgrade(sync_engine_for(url, write=False), lock=True)


def _upgrade(engine: Engine, *, lock: bool = False) -> None:
    from alembic import command

    try:
        with engine.begin() as connection:
            if lock:
                connection.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
            cfg = alembic_config()
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")
    finally:
        engine.dispose()
