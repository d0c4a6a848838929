"""Run Alembic migrations from code: the service calls this before serving."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations
from service.event_store.engines import sync_engine


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
