"""Alembic environment: runs against the service's database with a sync driver (sqlite3, or
psycopg for PostgreSQL; migrations run before the event loop serves anything)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.event_store.engines import sync_engine_for
from service.event_store.schema import metadata
from service.settings import Settings

config = context.config
target_metadata = metadata


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Use the connection handed in by ``service.recovery.migrate`` if any,
    else open one from settings (the ``alembic`` command line)."""
    supplied = config.attributes.get("connection")
    if supplied is not None:
        _run(supplied)
        return
    url = config.get_main_option("sqlalchemy.url") or Settings.from_env().database_url
    engine = sync_engine_for(url, write=False)
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
