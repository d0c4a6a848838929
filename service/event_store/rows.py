"""The one insert every writer runs, at the DBAPI level.

``statements.append`` (SQLAlchemy: the service and CLI tools) and the workers'
writers (stdlib sqlite3, or psycopg) all call :func:`insert_rows` inside their
own transaction (``BEGIN IMMEDIATE`` on SQLite), so there is one append path
whichever process writes and whichever database holds the log. What differs per
database is only the statements' text (:class:`AppendSQL`): PostgreSQL takes an
advisory lock first, which also reads the database's clock for ``recorded_at``, and
its insert also signals a NOTIFY (``postgres/sql.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from service.core.events import EventSource
from service.event_store.codec import NewEvent, dumps, encode, format_time
from service.event_store.unavailable import describe, disk_full_cause

INSERT_SQL = (
    "INSERT INTO events (event_id, type, schema_version, model, data, source, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(event_id) DO NOTHING RETURNING position"
)
EXISTING_SQL = "SELECT position FROM events WHERE event_id = ?"
LAST_OF_MODEL_SQL = "SELECT max(position) FROM events WHERE model = ?"  # ix_events_model_position


@dataclass(frozen=True, slots=True)
class AppendSQL:
    """The statements of one append, in one driver's parameter style."""

    insert: str
    """One row; ``RETURNING position``, no row when the ``event_id`` is already stored."""
    existing: str
    last_of_model: str
    lock: str | None = None
    """Run first: every later statement of the append happens under it (None: the caller's
    ``BEGIN IMMEDIATE`` already holds SQLite's write lock)."""
    clock: bool = False
    """Whether ``lock`` answers one row, the database's time once the lock is held, in
    :func:`~service.event_store.codec.format_time`'s text: then that is ``recorded_at``, not the
    writer's clock (PostgreSQL, where writers on several machines share one log)."""


SQLITE = AppendSQL(INSERT_SQL, EXISTING_SQL, LAST_OF_MODEL_SQL)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class StoreUnavailable(RuntimeError):
    """The database cannot be reached (a PostgreSQL server restarting, the network down).
    Nothing was acknowledged; the store reconnects on the next call once it is back.
    The API answers 503 ``store_unavailable``."""


FULL_RETRY_FIRST_S = 0.25
"""A writer that must not lose an event retries it on a full disk after this long, then twice as long..."""
FULL_RETRY_CAP_S = 5.0
"""... up to this long between tries (the workers' lifecycle events, the service's record of a worker's exit)."""


class LogDiskFull(RuntimeError):
    """The disk that holds the log is full (SQLite's ``SQLITE_FULL``, ``ENOSPC``, PostgreSQL's
    ``53100 disk_full``): nothing was acknowledged, and appends succeed again once there is
    space, with no restart. ``location`` names the file or the (redacted) database. The API
    answers 507 ``log_disk_full`` (503 on the routes of an API that has no 507)."""

    def __init__(self, location: str, why: str) -> None:
        super().__init__(
            f"the event log at {location} cannot be written: its disk is full ({why}); nothing was "
            "acknowledged, and appends resume by themselves once space is freed on that disk"
        )
        self.location = location

    @classmethod
    def of(cls, exc: BaseException, location: str) -> LogDiskFull | None:
        """``exc`` as a full disk, in the driver's own words; None when it is another failure."""
        cause = disk_full_cause(exc)
        return None if cause is None else cls(location, describe(cause))

    @classmethod
    def raise_if(cls, exc: BaseException, location: str) -> None:
        """Raise ``exc`` as a full disk (from ``exc``) when it is one; else return, for the caller's own
        handling: every writer translates a driver's error in this one place."""
        full = cls.of(exc, location)
        if full is not None:
            raise full from exc


class ConcurrencyConflict(Exception):
    """An event about ``model`` was appended after the state a decision was based on;
    nothing was written. Decide again on the newer state."""

    def __init__(self, model: str, expected: int, found: int) -> None:
        super().__init__(f"model {model!r} has an event at {found}, after the decision's state at {expected}")
        self.model = model
        self.expected = expected
        self.found = found


def insert_rows(
    cursor: Any,
    batch: Sequence[NewEvent],
    source: EventSource,
    expect: Mapping[str, int] | None = None,
    sql: AppendSQL = SQLITE,
    now: Callable[[], datetime] = _utc_now,
) -> list[int]:
    """Insert ``batch`` with the write lock already held; one position per event
    (an ``event_id`` already stored gives its original position). ``now``: the writer's clock,
    for ``recorded_at`` where the database gives none (:attr:`AppendSQL.clock`).

    ``expect`` (model -> position) is optimistic concurrency per model: when an
    event about a model was stored after that position, raise
    :class:`ConcurrencyConflict` before inserting anything (the caller rolls back)."""
    database_time: str | None = None
    if sql.lock is not None:
        cursor.execute(sql.lock)
        if sql.clock:
            database_time = str(cursor.fetchone()[0])
    for model, position in (expect or {}).items():
        cursor.execute(sql.last_of_model, (model,))
        found = cursor.fetchone()[0] or 0
        if found > position:
            raise ConcurrencyConflict(model, position, int(found))
    source_json = dumps(source)
    # Stamped after taking the write lock, so recorded_at follows position order: on PostgreSQL by the
    # database's one clock (writers' clocks may differ), on SQLite (one machine) by the writer's.
    recorded_at = database_time if database_time is not None else format_time(now())
    positions: list[int] = []
    for new in batch:
        cursor.execute(sql.insert, encode(new, source_json, recorded_at))
        row = cursor.fetchone()
        if row is None:
            cursor.execute(sql.existing, (new.event_id,))
            row = cursor.fetchone()
        positions.append(int(row[0]))
    return positions
