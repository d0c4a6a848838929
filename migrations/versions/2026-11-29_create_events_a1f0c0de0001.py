"""create the append-only events table

Revision ID: a1f0c0de0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a1f0c0de0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# PostgreSQL: BIGINT with no sequence. Appends are serialised by an advisory lock and each
# takes MAX(position) + 1 under it (service/event_store/postgres/sql.py): a sequence would
# burn a number on every rolled-back batch and every retried event_id, leaving gaps.
POSTGRES_TRIGGER_FUNCTION = """
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only: % is not allowed', TG_OP;
END
$$
"""


def _position() -> sa.Column[int]:
    postgres = op.get_bind().dialect.name == "postgresql"
    return sa.Column(
        "position", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=not postgres
    )


def upgrade() -> None:
    op.create_table(
        "events",
        _position(),
        sa.Column("event_id", sa.String(length=36), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("source", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.String(length=32), nullable=False),
        sa.UniqueConstraint("event_id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_model_position", "events", ["model", "position"])
    op.create_index("ix_events_type_position", "events", ["type", "position"])
    op.create_index("ix_events_recorded_at", "events", ["recorded_at"])
    if op.get_bind().dialect.name == "postgresql":
        _postgres_triggers()
        return
    # History is immutable: SQLite itself refuses UPDATE and DELETE.
    op.execute(
        "CREATE TRIGGER events_no_update BEFORE UPDATE ON events "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE is not allowed'); END"
    )
    op.execute(
        "CREATE TRIGGER events_no_delete BEFORE DELETE ON events "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE is not allowed'); END"
    )


def _postgres_triggers() -> None:
    # The same names as SQLite's; TRUNCATE too, which row triggers would not see.
    op.execute(POSTGRES_TRIGGER_FUNCTION)
    for name, when in (("events_no_update", "UPDATE"), ("events_no_delete", "DELETE")):
        op.execute(f"CREATE TRIGGER {name} BEFORE {when} ON events FOR EACH ROW EXECUTE FUNCTION events_append_only()")
    op.execute(
        "CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events "
        "FOR EACH STATEMENT EXECUTE FUNCTION events_append_only()"
    )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in ("events_no_delete", "events_no_update", "events_no_truncate")[: 3 if postgres else 2]:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON events" if postgres else ""))
    op.drop_table("events")
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS events_append_only()")
