"""The ``snapshots`` table: a disposable cache of the fold at a position.

Unlike ``events`` it is not history: rows are replaced, the oldest deleted,
and any row that does not decode is skipped. Losing every snapshot only costs
replay time. Functions take a *sync* SQLAlchemy ``Connection`` so the service
calls them through ``AsyncConnection.run_sync`` and CLI tools directly, like
:mod:`service.event_store.statements`.

The ``state`` column is written and read as JSON *text* through raw SQL (not
the ``JSON`` column type) so a damaged row is a decode error we can catch per
row rather than an exception in the middle of result processing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import Connection

from service.core.snapshot import state_from_json, state_to_json
from service.core.state import RouterState
from service.event_store.codec import dumps, format_time, loads
from service.event_store.engines import sync_engine_for
from service.event_store.statements import autobegin, raw_sql

KEEP = 3
"""Snapshots kept: the newest few, so one damaged row still leaves a usable one."""

_log = structlog.get_logger(__name__)

# ``?`` placeholders, turned into the connection's driver style by ``raw_sql``; the state
# is read back as text on both databases (PostgreSQL's json column would arrive parsed).
_INSERT = "INSERT INTO snapshots (position, fold_version, state, created_at) VALUES (?, ?, ?, ?) RETURNING id"
_PRUNE = "DELETE FROM snapshots WHERE id NOT IN (SELECT id FROM snapshots ORDER BY position DESC, id DESC LIMIT ?)"
# Newest first; a snapshot beyond the log's head cannot be the fold of this log.
_CANDIDATES = (
    "SELECT id, position, CAST(state AS TEXT) FROM snapshots "
    "WHERE fold_version = ? AND position <= (SELECT COALESCE(MAX(position), 0) FROM events) "
    "ORDER BY position DESC, id DESC"
)
_BEYOND_HEAD = (
    "SELECT COUNT(*) FROM snapshots "
    "WHERE fold_version = ? AND position > (SELECT COALESCE(MAX(position), 0) FROM events)"
)
_LIST = (
    "SELECT id, position, fold_version, created_at, length(CAST(state AS TEXT)) FROM snapshots "
    "ORDER BY position DESC, id DESC"
)


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One row's envelope (for ``modelrouter verify`` and diagnostics)."""

    id: int
    position: int
    fold_version: int
    created_at: str
    size: int


def encode_state(state: RouterState) -> str:
    """The ``state`` column text. CPU-bound for big states: the service runs it
    off the event loop, then writes with :func:`save_encoded`."""
    return dumps(state_to_json(state))


def decode_state(text: str | bytes) -> RouterState:
    """Inverse of :func:`encode_state`; raises on anything it cannot read exactly."""
    data = loads(text)
    if not isinstance(data, dict):
        msg = f"snapshot state is a {type(data).__name__}, not an object"
        raise ValueError(msg)
    return state_from_json(data)


def save_encoded(conn: Connection, position: int, fold_version: int, state_json: str, *, keep: int = KEEP) -> int:
    """Insert one snapshot row and prune to the newest ``keep``, in one transaction
    (atomic on a write engine, whose ``begin`` is ``BEGIN IMMEDIATE``). Returns the row id."""
    created_at = format_time(datetime.now(UTC))
    with conn.begin():
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
        try:
            cursor.execute(raw_sql(conn, _INSERT), (int(position), int(fold_version), state_json, created_at))
            row_id = int(cursor.fetchone()[0])  # type: ignore[index]  # RETURNING always returns the row
            cursor.execute(raw_sql(conn, _PRUNE), (max(1, int(keep)),))
        finally:
            cursor.close()
    return row_id


def save_snapshot(conn: Connection, state: RouterState, fold_version: int, *, keep: int = KEEP) -> int:
    """Store ``state`` as the fold at ``state.position``; keep only the newest ``keep`` rows."""
    return save_encoded(conn, state.position, fold_version, encode_state(state), keep=keep)


def load_latest_snapshot(conn: Connection, fold_version: int) -> tuple[RouterState, int] | None:
    """The newest snapshot written by ``fold_version`` that decodes, as
    ``(state, position)``; None when there is none.

    Rows of another fold version are ignored (another fold may give another
    state), as are rows beyond the log's head and rows that fail to decode or
    whose state disagrees with their position column: a snapshot is a cache,
    never a source of truth, so a bad one only means a longer replay."""
    autobegin(conn)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
    try:
        cursor.execute(raw_sql(conn, _BEYOND_HEAD), (int(fold_version),))
        beyond = int(cursor.fetchone()[0])  # type: ignore[index]  # count(*) always returns a row
        if beyond:
            _log.warning("snapshot_beyond_head_ignored", count=beyond)
        cursor.execute(raw_sql(conn, _CANDIDATES), (int(fold_version),))
        rows: list[Any] = list(cursor.fetchall())
    finally:
        cursor.close()
    for row_id, position, text in rows:
        try:
            state = decode_state(text)
            if state.position != position:
                msg = f"state.position {state.position} != row position {position}"
                raise ValueError(msg)
        except Exception as exc:  # any damage: skip the row, never fail startup
            _log.warning("snapshot_ignored", id=row_id, position=position, error=f"{type(exc).__name__}: {exc}")
            continue
        return state, int(position)
    return None


def list_snapshots(conn: Connection) -> list[SnapshotInfo]:
    """Every stored snapshot's envelope, newest first (any fold version)."""
    autobegin(conn)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
    try:
        cursor.execute(_LIST)
        return [SnapshotInfo(int(i), int(p), int(v), str(c), int(n or 0)) for i, p, v, c, n in cursor.fetchall()]
    finally:
        cursor.close()


def save_snapshot_file(db_path: Path | str, state: RouterState, fold_version: int, *, keep: int = KEEP) -> int:
    """:func:`save_snapshot` on the SQLite file at ``db_path``, or a PostgreSQL URL (tools, tests)."""
    engine = sync_engine_for(db_path, write=True)
    try:
        with engine.connect() as conn:
            return save_snapshot(conn, state, fold_version, keep=keep)
    finally:
        engine.dispose()
