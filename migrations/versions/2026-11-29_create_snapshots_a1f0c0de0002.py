"""create the snapshots table (a disposable cache of the fold)

Revision ID: a1f0c0de0002
Revises: a1f0c0de0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a1f0c0de0002"
down_revision: str | None = "a1f0c0de0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("position", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("fold_version", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.String(length=32), nullable=False),
    )
    op.create_index("ix_snapshots_position", "snapshots", ["position"])


def downgrade() -> None:
    op.drop_table("snapshots")
