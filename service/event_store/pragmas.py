"""Per-connection SQLite settings every process applies (stdlib only: workers
import this without loading SQLAlchemy)."""

from __future__ import annotations

from typing import Any, Literal

Synchronous = Literal["FULL", "NORMAL"]
BUSY_TIMEOUT_MS = 30_000


def configure_connection(dbapi_conn: Any, synchronous: Synchronous, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
    """PRAGMAs are per connection, so every new connection runs these."""
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA synchronous={synchronous}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
