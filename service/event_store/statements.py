"""Statements over a *sync* SQLAlchemy ``Connection``, for SQLite and PostgreSQL alike.

The service runs them through ``AsyncConnection.run_sync`` and CLI tools call
them directly; workers append through their own writers (stdlib sqlite3, or
psycopg), which run the same :func:`rows.insert_rows`. The raw-cursor paths
pick their SQL from the connection's dialect (:func:`raw_sql`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select

from service.core.events import EventSource
from service.event_store.codec import NewEvent, format_time, loads
from service.event_store.rows import SQLITE, AppendSQL, insert_rows
from service.event_store.schema import events

_PAGE = (
    "SELECT position, event_id, type, schema_version, model, data, source, recorded_at "
    "FROM events WHERE position > ? ORDER BY position LIMIT ?"
)
_FIRST = -(2**63)  # "no lower bound" as a position: below any SQLite integer

COLUMNS = (
    events.c.position,
    events.c.event_id,
    events.c.type,
    events.c.schema_version,
    events.c.model,
    events.c.data,
    events.c.source,
    events.c.recorded_at,
)


_RAW: dict[tuple[str, str], str] = {}


def raw_sql(conn: Connection, sql: str) -> str:
    """``sql`` (written with ``?`` placeholders, SQLite's) in the paramstyle of ``conn``'s driver."""
    if conn.dialect.name == "sqlite":
        return sql
    key = (conn.dialect.driver, sql)
    found = _RAW.get(key)
    if found is None:
        from service.event_store.postgres.sql import for_driver

        found = _RAW[key] = for_driver(conn.dialect.driver, sql)
    return found


def autobegin(conn: Connection) -> None:
    """Begin ``conn``'s transaction in SQLAlchemy's books before a raw DBAPI cursor reads.

    A raw cursor bypasses SQLAlchemy's autobegin, but on PostgreSQL the driver still opens a
    transaction, which ``conn.rollback()`` then leaves open (SQLAlchemy saw none): the tail's
    connection sat "idle in transaction", where PostgreSQL delivers no NOTIFY at all
    (``tests/event_store/test_postgres_tail.py``). SQLite's reads run in driver autocommit."""
    if conn.dialect.name != "sqlite" and not conn.in_transaction():
        conn.begin()


def append_sql(conn: Connection) -> AppendSQL:
    """The append's statements for ``conn``'s database and driver."""
    if conn.dialect.name == "sqlite":
        return SQLITE
    from service.event_store.postgres.sql import ASYNCPG, PSYCOPG

    return ASYNCPG if conn.dialect.driver == "asyncpg" else PSYCOPG


def append(
    conn: Connection, batch: Sequence[NewEvent], source: EventSource, expect: Mapping[str, int] | None = None
) -> list[int]:
    """Append ``batch`` in one transaction (``BEGIN IMMEDIATE`` on SQLite): all or nothing.

    Returns one position per event; an ``event_id`` already stored returns its
    original position and stores nothing new. SQLAlchemy owns the transaction;
    the rows go through the DBAPI cursor (:func:`rows.insert_rows`, shared with
    the workers' writer) because this is the hot path. ``expect``: see
    :func:`rows.insert_rows` (a conflict rolls the transaction back)."""
    with conn.begin():
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
        try:
            return insert_rows(cursor, batch, source, expect, append_sql(conn))
        finally:
            cursor.close()


@dataclass(frozen=True, slots=True)
class EventFilter:
    """The audit query: every field narrows the result; None means no filter."""

    after: int | None = None
    before: int | None = None
    model: str | None = None
    types: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100
    node: str | None = None  # ``source.node``: the cluster node that wrote it


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _type_clause(patterns: Sequence[str]) -> Any:
    # A trailing '*' is a prefix match (download_* -> download_...).
    clauses = [
        events.c.type.like(_escape_like(p[:-1]) + "%", escape="\\") if p.endswith("*") else events.c.type == p
        for p in patterns
    ]
    return or_(*clauses)


def _page_sql(conn: Connection) -> str:
    if conn.dialect.name == "sqlite":
        return _PAGE
    from service.event_store.postgres.sql import PAGE_SQL

    return raw_sql(conn, PAGE_SQL)


def select_page_raw(conn: Connection, after: int, limit: int) -> list[tuple[Any, ...]]:
    """Rows with ``position > after`` in order, at most ``limit``, straight from
    the DBAPI cursor: ``data`` and ``source`` stay JSON *text* (decode them with
    ``codec.decode_rows``). The replay path: SQLAlchemy's per-row result
    processing costs more than the query itself."""
    autobegin(conn)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
    try:
        cursor.execute(_page_sql(conn), (int(after), int(limit)))
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _is_plain_page(flt: EventFilter) -> bool:
    return (
        flt.before is None
        and flt.model is None
        and not flt.types
        and flt.since is None
        and flt.until is None
        and flt.node is None
        and flt.limit >= 0
    )


def select_events(conn: Connection, flt: EventFilter) -> list[Sequence[Any]]:
    """Rows in position order matching ``flt`` (at most ``flt.limit``).

    The tail's query (only ``after``/``limit``) takes the raw-cursor path and
    decodes the JSON columns like the ``JSON`` column type would; every other
    filter goes through SQLAlchemy."""
    if _is_plain_page(flt):
        return [
            (pos, eid, typ, ver, model, loads(data), loads(source), at)
            for pos, eid, typ, ver, model, data, source, at in select_page_raw(
                conn, _FIRST if flt.after is None else flt.after, flt.limit
            )
        ]
    conditions = []
    if flt.after is not None:
        conditions.append(events.c.position > flt.after)
    if flt.before is not None:
        conditions.append(events.c.position < flt.before)
    if flt.model is not None:
        conditions.append(events.c.model == flt.model)
    if flt.types:
        conditions.append(_type_clause(flt.types))
    if flt.since is not None:
        conditions.append(events.c.recorded_at >= format_time(flt.since))
    if flt.until is not None:
        conditions.append(events.c.recorded_at <= format_time(flt.until))
    if flt.node is not None:
        conditions.append(events.c.source["node"].as_string() == flt.node)
    query = select(*COLUMNS).where(and_(True, *conditions)).order_by(events.c.position).limit(flt.limit)
    return [tuple(row) for row in conn.execute(query)]


def head(conn: Connection) -> int:
    """The highest position stored (0 for an empty log)."""
    return int(conn.execute(select(func.coalesce(func.max(events.c.position), 0))).scalar_one())


def data_version(conn: Connection) -> int:
    """Changes whenever *another* connection commits: the cheap tail signal (SQLite)."""
    return int(conn.exec_driver_sql("PRAGMA data_version").scalar_one())


def change_marker(conn: Connection) -> int:
    """A number that changes when someone appended: SQLite's ``data_version``; on PostgreSQL,
    which has none, the head position (the tail's safety net polls by position there)."""
    return data_version(conn) if conn.dialect.name == "sqlite" else head(conn)
