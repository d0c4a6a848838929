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


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", sa.Integer(), primary_key=True, autoincrement=True),
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
    # History is immutable: SQLite itself refuses UPDATE and DELETE.
    op.execute(
        "CREATE TRIGGER events_no_update BEFORE UPDATE ON events "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE is not allowed'); END"
    )
    op.execute(
        "CREATE TRIGGER events_no_delete BEFORE DELETE ON events "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE is not allowed'); END"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS events_no_delete")
    op.execute("DROP TRIGGER IF EXISTS events_no_update")
    op.drop_table("events")
