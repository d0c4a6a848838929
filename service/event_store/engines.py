"""Engine factories with the connection discipline every process shares.

* WAL, so readers never block the single writer and workers can append
  alongside the service;
* ``busy_timeout`` so a writer waits for the lock instead of failing;
* driver-level autocommit plus an explicit ``BEGIN IMMEDIATE`` on write
  engines: a deferred transaction that later upgrades to a write gets
  SQLITE_BUSY at once, bypassing busy_timeout (see docs/architecture.md);
* ``synchronous`` FULL by default (durable across power loss), NORMAL on request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from service.event_store.pragmas import Synchronous, configure_connection
from service.event_store.urls import is_postgres, is_sqlite, sqlite_path


def _install_hooks(engine: Engine, synchronous: Synchronous, *, write: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        configure_connection(dbapi_conn, synchronous)

    if write:

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # Straight to the DBAPI: this runs once per append, the hot path.
            cursor = conn.connection.dbapi_connection.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            cursor.close()


def sync_engine(path: Path | str, synchronous: Synchronous = "FULL", *, write: bool = True) -> Engine:
    """Engine for worker processes and CLI tools (stdlib sqlite3 driver)."""
    engine = create_engine(f"sqlite:///{path}", connect_args={"isolation_level": None})
    _install_hooks(engine, synchronous, write=write)
    return engine


def async_engine(path: Path | str, synchronous: Synchronous = "FULL", *, write: bool = True) -> AsyncEngine:
    """Engine for the service (aiosqlite). Use one write engine and one read engine."""
    engine = create_async_engine(
        f"sqlite+aiosqlite:///{path}",
        connect_args={"isolation_level": None},
        pool_size=1 if write else 4,
        max_overflow=0 if write else 4,
    )
    _install_hooks(engine.sync_engine, synchronous, write=write)
    return engine


def sync_engine_for(target: Path | str, synchronous: Synchronous = "FULL", *, write: bool = True) -> Engine:
    """A sync engine for a SQLite file (a path or ``sqlite:///`` URL) or a PostgreSQL URL.
    The PostgreSQL module (and psycopg) is imported only for a PostgreSQL URL."""
    text = str(target)
    if is_postgres(text):
        from service.event_store.postgres.engines import sync_engine as pg_sync_engine

        return pg_sync_engine(text, write=write)
    return sync_engine(sqlite_path(text) if is_sqlite(text) else text, synchronous, write=write)


def async_engine_for(target: Path | str, synchronous: Synchronous = "FULL", *, write: bool = True) -> AsyncEngine:
    """:func:`sync_engine_for` for the service (aiosqlite or asyncpg)."""
    text = str(target)
    if is_postgres(text):
        from service.event_store.postgres.engines import async_engine as pg_async_engine

        return pg_async_engine(text, write=write)
    return async_engine(sqlite_path(text) if is_sqlite(text) else text, synchronous, write=write)
