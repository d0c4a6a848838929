"""Run Alembic migrations from code: the service calls this before serving."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from service.event_store.engines import sync_engine

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str | None = None) -> Config:
    """Config pointing at this project's ``migrations/`` whatever the cwd."""
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def upgrade(db_path: Path) -> None:
    """``alembic upgrade head`` on ``db_path`` (created if missing)."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    engine = sync_engine(db_path, write=False)
    try:
        with engine.begin() as connection:
            cfg = alembic_config()
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")
    finally:
        engine.dispose()
