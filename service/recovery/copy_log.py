"""Copying a log between databases, positions and event ids preserved: ``modelrouter migrate-store``.

How a single node grows into a cluster: its SQLite log moves to the PostgreSQL server the
nodes will share (or back, to take a log home). Rows are copied as stored -- the same
``position``, ``event_id``, payload text and ``recorded_at`` -- so every SSE client's
``Last-Event-ID``, every audit reference and ``verify`` read the copy as the original.

Resumable and refusing: a target that already holds a prefix of the source (an interrupted
copy) is continued after it; a target holding anything else is refused, since merging two
histories would give both a meaning neither had. Snapshots are not copied: they are a cache,
and the service writes a fresh one after its first replay of the copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, inspect

from service.event_store import statements
from service.event_store.engines import sync_engine_for
from service.event_store.urls import check_url, display_name, is_sqlite, sqlite_path
from service.recovery.migrate import upgrade_url

PAGE = 5000
_INSERT = (
    "INSERT INTO events (position, event_id, type, schema_version, model, data, source, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_IDS = "SELECT position, event_id FROM events WHERE position > ? ORDER BY position LIMIT ?"


class CopyRefused(ValueError):
    """The target already holds events that are not the start of the source's log."""


@dataclass(frozen=True, slots=True)
class CopyReport:
    copied: int
    already_there: int
    head: int


def _ids(conn: Connection, after: int, limit: int) -> list[tuple[int, str]]:
    statements.autobegin(conn)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
    try:
        cursor.execute(statements.raw_sql(conn, _IDS), (after, limit))
        return [(int(p), str(e)) for p, e in cursor.fetchall()]
    finally:
        cursor.close()


def _check_prefix(source: Connection, target: Connection, names: tuple[str, str]) -> int:
    """The target's head, once its events are shown to be the source's first ones."""
    after = -(2**63)
    while page := _ids(target, after, PAGE):
        if _ids(source, after, len(page)) != page:
            msg = (
                f"{names[1]} already holds events that are not the start of {names[0]}'s log; "
                "copy into an empty database"
            )
            raise CopyRefused(msg)
        after = page[-1][0]
    return max(after, 0)


def _write_page(engine: Engine, rows: list[tuple[object, ...]]) -> None:
    with engine.connect() as conn, conn.begin():
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
        try:
            if conn.dialect.name == "postgresql":  # the appenders' lock: no append interleaves with the copy
                from service.event_store.postgres.sql import APPEND_LOCK

                cursor.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
            cursor.executemany(statements.raw_sql(conn, _INSERT), rows)
        finally:
            cursor.close()


def copy_log(source_url: str, target_url: str, *, progress: Callable[[int], None] | None = None) -> CopyReport:
    """Copy every event of ``source_url``'s log into ``target_url``'s (migrated first)."""
    check_url(source_url)
    check_url(target_url)
    names = (display_name(source_url), display_name(target_url))
    if names[0] == names[1]:
        msg = f"--from and --to name the same database ({names[0]})"
        raise CopyRefused(msg)
    if is_sqlite(source_url) and not sqlite_path(source_url).is_file():
        msg = f"{names[0]}: no such database file"
        raise CopyRefused(msg)
    upgrade_url(target_url)
    source = sync_engine_for(source_url, write=False)
    target = sync_engine_for(target_url, write=True)
    try:
        with source.connect() as src:
            if not inspect(src).has_table("events"):
                msg = f"{names[0]} holds no modelrouter event log (no events table)"
                raise CopyRefused(msg)
            with target.connect() as dst:
                done = _check_prefix(src, dst, names)
            already, after, copied = done, done, 0
            while rows := statements.select_page_raw(src, after, PAGE):
                _write_page(target, [tuple(r) for r in rows])
                copied += len(rows)
                after = int(rows[-1][0])
                if progress is not None:
                    progress(copied)
        return CopyReport(copied=copied, already_there=already, head=after)
    finally:
        source.dispose()
        target.dispose()
