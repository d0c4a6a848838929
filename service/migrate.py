"""Run Alembic migrations from code: the service calls this before serving."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

import migrations
from service.event_store.engines import sync_engine, sync_engine_for
from service.event_store.urls import is_postgres, sqlite_path

MIGRATION_LOCK = 0x6D6F_6465_6C6D_6967  # "modelmig": nodes starting at once migrate one at a time


def alembic_config(url: str | None = None) -> Config:
    """Alembic's config built in code, pointing at the installed ``migrations`` package.

    Neither ``alembic.ini`` nor the cwd matters, so a wheel install migrates too.
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).resolve().parent))
    cfg.set_main_option("path_separator", "os")
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def upgrade(db_path: Path) -> None:
    """``alembic upgrade head`` on the SQLite file ``db_path`` (created if missing)."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    _upgrade(sync_engine(db_path, write=False))


def upgrade_url(url: str) -> None:
    """``alembic upgrade head`` on the database ``url`` names: a SQLite URL as :func:`upgrade`;
    on PostgreSQL the database must exist, and the DDL runs in one transaction under an
    advisory lock, so two services starting at once do not both create the tables."""
    if not is_postgres(url):
        upgrade(sqlite_path(url))
        return
    _upgrade(sync_engine_for(url, write=False), lock=True)


def _upgrade(engine: Engine, *, lock: bool = False) -> None:
    try:
        with engine.begin() as connection:
            if lock:
                connection.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
            cfg = alembic_config()
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")
    finally:
        engine.dispose()
