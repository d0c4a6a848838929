"""The one schema module: the ``events`` table, shared by the service (async)
and the workers (sync), and the target of Alembic's autogenerate check."""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

Position = BigInteger().with_variant(Integer(), "sqlite")
"""BIGINT on PostgreSQL; INTEGER on SQLite, where only that exact type aliases the rowid."""

events = Table(
    "events",
    metadata,
    # Assigned inside the write lock (SQLite: INTEGER PRIMARY KEY AUTOINCREMENT under BEGIN
    # IMMEDIATE; PostgreSQL: MAX + 1 under an advisory lock), so position order is commit
    # order and positions are never reused.
    Column("position", Position, primary_key=True, autoincrement=True),
    Column("event_id", String(36), nullable=False, unique=True),
    Column("type", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("model", Text, nullable=True),
    Column("data", JSON, nullable=False),
    Column("source", JSON, nullable=False),
    # Fixed-width ISO-8601 UTC text ("2026-11-29T15:00:00.123456Z"): sorts as time.
    Column("recorded_at", String(32), nullable=False),
    Index("ix_events_model_position", "model", "position"),
    Index("ix_events_type_position", "type", "position"),
    Index("ix_events_recorded_at", "recorded_at"),
    sqlite_autoincrement=True,
)

snapshots = Table(
    "snapshots",
    metadata,
    # A cache of the fold at a position; losing or ignoring it only costs replay time.
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("position", Position, nullable=False),
    Column("fold_version", Integer, nullable=False),
    Column("state", JSON, nullable=False),
    Column("created_at", String(32), nullable=False),
    Index("ix_snapshots_position", "position"),
)
