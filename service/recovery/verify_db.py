"""What ``modelrouter verify`` asks of the database, for a SQLite file and a PostgreSQL log.

The checks themselves (``verify.py``) are the same on both; only the catalogue questions
(is there a table, which triggers exist, what did AUTOINCREMENT hand out) and the physical
integrity check differ. Both read inside one read-only transaction, so every check sees one
state of the log while the service and its workers keep appending.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Protocol

from service.event_store.urls import libpq_url, redacted

SQLITE_TRIGGERS = ("events_no_update", "events_no_delete")
POSTGRES_TRIGGERS = (*SQLITE_TRIGGERS, "events_no_truncate")


class LogDatabase(Protocol):
    """A read-only view of one log, open inside one read transaction."""

    name: str
    triggers_expected: tuple[str, ...]
    page_sql: str
    """Rows ``position > ? ORDER BY position LIMIT ?``, JSON columns as text."""
    snapshot_sql: str
    """``id, position, fold_version, state`` (state as text) of every snapshot."""

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``sql``, written with ``?`` placeholders."""

    def integrity(self) -> tuple[bool, str, list[str]]:
        """``(ok, detail, problems)`` of the database's own page check."""

    def has_table(self, name: str) -> bool: ...

    def triggers(self) -> set[str]: ...

    def handed_out(self) -> int | None:
        """The highest position ever assigned, where the database records it (SQLite's
        AUTOINCREMENT sequence); None where it does not (PostgreSQL assigns MAX + 1)."""

    def close(self) -> None: ...


_PAGE = (
    "SELECT position, event_id, type, schema_version, model, data, source, recorded_at "
    "FROM events WHERE position > ? ORDER BY position LIMIT ?"
)


class SqliteLog:
    """A SQLite file, opened read-only when the file system allows it."""

    triggers_expected: tuple[str, ...] = SQLITE_TRIGGERS
    page_sql = _PAGE
    snapshot_sql = "SELECT id, position, fold_version, state FROM snapshots ORDER BY position, id"

    def __init__(self, path: Path) -> None:
        self.name = str(path)
        # Read-only: verifying must never change what it verifies. Autocommit mode
        # so that the one explicit read transaction below is ours to control.
        try:
            self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        except sqlite3.OperationalError:
            self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        self._conn.execute("BEGIN")

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, params).fetchall())

    def integrity(self) -> tuple[bool, str, list[str]]:
        rows = [str(r[0]) for r in self._conn.execute("PRAGMA integrity_check")]
        if rows == ["ok"]:
            return True, "PRAGMA integrity_check: ok", []
        return False, f"PRAGMA integrity_check: {len(rows)} problem(s)", rows

    def has_table(self, name: str) -> bool:
        found = self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return found.fetchone() is not None

    def triggers(self) -> set[str]:
        return {str(r[0]) for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}

    def handed_out(self) -> int | None:
        if self._conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone() is None:
            return None
        row = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        self._conn.close()


class PostgresLog:
    """A PostgreSQL log, read in one REPEATABLE READ, READ ONLY transaction (one snapshot)."""

    triggers_expected: tuple[str, ...] = POSTGRES_TRIGGERS
    page_sql = (
        "SELECT position, event_id, type, schema_version, model, data::text, source::text, recorded_at "
        "FROM events WHERE position > ? ORDER BY position LIMIT ?"
    )
    snapshot_sql = "SELECT id, position, fold_version, state::text FROM snapshots ORDER BY position, id"

    def __init__(self, url: str) -> None:
        import psycopg  # only for a PostgreSQL log

        self.name = redacted(url)
        self._conn = psycopg.connect(libpq_url(url), connect_timeout=10)
        self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql.replace("?", "%s"), params).fetchall())

    def integrity(self) -> tuple[bool, str, list[str]]:
        # The server checks its own pages (data checksums when initdb'd with -k; pg_amcheck
        # for a full pass): nothing a client can do cheaply here.
        return True, "pages are the server's to check (data checksums, pg_amcheck)", []

    def has_table(self, name: str) -> bool:
        return self.query("SELECT to_regclass(?) IS NOT NULL", (name,))[0][0] is True

    def triggers(self) -> set[str]:
        sql = "SELECT tgname FROM pg_trigger WHERE tgrelid = 'events'::regclass AND NOT tgisinternal"
        return {str(r[0]) for r in self.query(sql)}

    def handed_out(self) -> int | None:
        return None

    def close(self) -> None:
        self._conn.close()
