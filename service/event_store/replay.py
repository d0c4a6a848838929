"""The replay's fast path: fold a page of raw rows, leaving out what a later event supersedes.

A realistic log is mostly ``download_progress`` (thousands per download): replaying one
million events spent about 19 s decoding and folding events that the next one of their job
overwrites. :func:`fold_rows` reads only the payload's subject (and ``bytes_total``) of the
events :mod:`service.core.superseding` names, with msgspec (about 0.3 us for a progress
payload, instead of about 3 us to decode and 12 us to fold it), asks
:func:`~service.core.superseding.plan` which to fold, and decodes and folds only those, with
:func:`codec.decode_rows`, exactly as before.

The result equals folding every decoded row (``tests/recovery/test_fast_decode.py`` checks it
on random logs and pages). A left-out row's payload is still parsed: a malformed or
unexpected one is simply kept, so it is decoded as before and raises as before. Its envelope
(``event_id``, ``source``, ``recorded_at``) is not needed: :func:`read_page` reads it only
for the rows that are kept (reading those three columns of every row was about 40% of the
read), in the same transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from collections.abc import AsyncGenerator, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from service.core.events import EVENT_TYPES
from service.core.state import RouterState
from service.core.superseding import SUPERSEDING, Entry, Superseding, fold_superseding, plan
from service.event_store.codec import decode_rows
from service.event_store.replay_summary import SUMMARY_SQL, Summary, plan_summary
from service.event_store.statements import autobegin, head, raw_sql

__all__ = ["Page", "entries", "fold_page", "fold_rows", "planned_pages", "read_page", "read_range"]

_Key = Callable[[str | bytes], tuple[Hashable, bool]]
"""Payload text -> ``(run, complete)``; raises ``msgspec.DecodeError`` for anything else."""


def _key_reader(type_: str, rule: Superseding) -> _Key:
    # The struct holds only the fields the plan needs (the others are skipped by msgspec's
    # parser, still checked as JSON). Strict types: a subject that is not a string, or a
    # total that is not an integer, raises, and the row is kept (decoded as before).
    if rule.zero_keeps is None:
        only = msgspec.defstruct(f"{type_}_run", [("subject", str)], rename={"subject": rule.subject})
        # Any: an instance of the struct defstruct made, whose fields mypy cannot see.
        decode_subject: Callable[[str | bytes], Any] = msgspec.json.Decoder(only).decode

        def subject_only(data: str | bytes) -> tuple[Hashable, bool]:
            return (type_, decode_subject(data).subject), True

        return subject_only
    fields: list[tuple[str, type, int] | tuple[str, type]] = [("subject", str), ("total", int, 0)]
    with_total = msgspec.defstruct(f"{type_}_run", fields, rename={"subject": rule.subject, "total": rule.zero_keeps})
    decode_total: Callable[[str | bytes], Any] = msgspec.json.Decoder(with_total).decode  # Any: as above

    def subject_and_total(data: str | bytes) -> tuple[Hashable, bool]:
        key = decode_total(data)
        return (type_, key.subject), key.total != 0

    return subject_and_total


_KEYS: dict[str, tuple[int, _Key]] = {
    type_: (EVENT_TYPES[type_].VERSION, _key_reader(type_, rule)) for type_, rule in SUPERSEDING.items()
}
"""Per superseding type: the current schema version (older ones are kept) and its key reader."""


# Any: a row's columns as the driver returns them (ints, str, or a JSON value).
def entries(rows: Sequence[Sequence[Any]]) -> list[Entry]:
    """:data:`~service.core.superseding.Entry` per row of ``select_page_raw``'s shape."""
    out: list[Entry] = []
    append = out.append
    keys = _KEYS
    for row in rows:
        model = row[4]
        found = keys.get(row[2])
        if found is None or row[3] != found[0] or not isinstance(row[5], (str, bytes)):
            append((model, None, False))
            continue
        try:
            run, complete = found[1](row[5])
        except msgspec.DecodeError:  # also ValidationError: not the payload a run is made of
            append((model, None, False))
            continue
        append((model, run, complete))
    return out


# Any: as in entries.
def fold_rows(state: RouterState, rows: Sequence[Sequence[Any]]) -> RouterState:
    """``state`` with ``rows`` (consecutive, in position order) folded: the same state as
    folding ``decode_rows(rows)`` one by one, at a fraction of the cost when most rows are
    superseded. Raises what ``decode_rows`` raises for a row it cannot decode."""
    weights = plan(entries(rows))
    kept = [row for row, weight in zip(rows, weights, strict=True) if weight >= 0]
    stands_for = [weight for weight in weights if weight >= 0]
    for recorded, weight in zip(decode_rows(kept), stands_for, strict=True):
        state = fold_superseding(state, recorded, weight)
    return state


_RUN_TYPES = ", ".join(f"'{type_}'" for type_ in SUPERSEDING)  # constants of this code, not input
_NO_ENVELOPE = f"CASE WHEN type IN ({_RUN_TYPES}) THEN NULL ELSE {{}} END"
_KEYS_SQL = {
    dialect: (
        f"SELECT position, {_NO_ENVELOPE.format('event_id')}, type, schema_version, model, {data}, "
        f"{_NO_ENVELOPE.format(source)}, {_NO_ENVELOPE.format('recorded_at')} "
        "FROM events WHERE position > ? AND position <= ? ORDER BY position LIMIT ?"
    )
    for dialect, data, source in (("sqlite", "data", "source"), ("postgresql", "data::text", "source::text"))
}
"""``select_page_raw``'s page, without the envelope of rows a later one may supersede."""
_ENVELOPES_SQL = {
    "sqlite": "SELECT position, event_id, source, recorded_at FROM events WHERE position IN ({})",
    "postgresql": "SELECT position, event_id, source::text, recorded_at FROM events WHERE position IN ({})",
}
_ROWS_SQL = {
    "sqlite": "SELECT position, event_id, type, schema_version, model, data, source, recorded_at "
    "FROM events WHERE position IN ({})",
}
"""Whole rows by position, in ``select_page_raw``'s shape (the summary is SQLite's only)."""
_CHUNK = 500
"""Positions per envelope query (far below every driver's limit on parameters)."""


@dataclass(frozen=True, slots=True)
class Page:
    """What :func:`read_page` read: the rows to fold, in order, and what each stands for."""

    count: int
    """Rows read (kept or not)."""
    # Any: as in entries.
    kept: list[tuple[Any, ...]]
    stands_for: list[int]


_NO_BOUND = 2**63 - 1
"""``upto`` when there is none: above every position."""


def read_page(conn: Connection, after: int, limit: int, upto: int = _NO_BOUND) -> Page:
    """The next page after ``after`` (at most ``limit`` rows, none after ``upto``), planned row by
    row: only the kept rows, with their envelopes.

    The last row read is always kept (nothing after it supersedes it), so folding the page
    leaves the state at the page's last position."""
    autobegin(conn)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
    try:
        cursor.execute(raw_sql(conn, _KEYS_SQL[conn.dialect.name]), (int(after), int(upto), int(limit)))
        rows = cursor.fetchall()
        weights = plan(entries(rows))
        kept = [row for row, weight in zip(rows, weights, strict=True) if weight >= 0]
        missing = [row[0] for row in kept if row[1] is None]
        envelopes = {row[0]: row for row in _rows_at(conn, cursor, missing, _ENVELOPES_SQL)}
    finally:
        cursor.close()
    if envelopes:
        kept = [row if row[1] is not None else _with_envelope(row, envelopes[row[0]]) for row in kept]
    return Page(len(rows), kept, [weight for weight in weights if weight >= 0])


def read_range(conn: Connection, after: int, upto: int) -> Page:
    """The rows at positions ``(after, upto]`` planned: from their summary on SQLite when it can
    be read for sure (:mod:`~service.event_store.replay_summary`), else row by row."""
    if conn.dialect.name == "sqlite":
        autobegin(conn)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # as in read_page
        try:
            planned = _summary(cursor, after, upto, conn.dialect.dbapi)
            if planned is not None:
                count, positions, stands_for = planned
                return Page(count, _rows_at(conn, cursor, positions), stands_for)
        finally:
            cursor.close()
    return read_page(conn, after, upto - after, upto)


async def planned_pages(conn: AsyncConnection, after: int, limit: int) -> AsyncGenerator[Page, None]:
    """The planned pages of the log after ``after`` (of ``limit`` positions each) up to its head
    when called (close it when stopping early: ``contextlib.aclosing``).

    On SQLite pages are position ranges planned from their summary (:func:`read_range`), and the
    summary of the page after the next is read in the driver's thread, where SQLite runs without
    the GIL (about half of a 1M-event replay's CPU), while the caller folds this page and the
    next one is planned, so that a second core takes that half (see :data:`_SWITCH`). Elsewhere
    pages of ``limit`` rows, read row by row."""
    if conn.dialect.name != "sqlite":
        while True:
            page = await conn.run_sync(read_page, after, limit)
            yield page
            if page.count < limit:
                return
            after = page.kept[-1][0]
    end = await conn.run_sync(head)
    driver = (await conn.get_raw_connection()).driver_connection  # aiosqlite's: one queue, in order
    switching = sys.getswitchinterval()
    sys.setswitchinterval(_SWITCH)
    pending = await _read_ahead(driver, after, limit, end)
    try:
        while pending is not None:  # None once past the head
            row = await pending
            pending = await _read_ahead(driver, after + limit, limit, end)
            planned = plan_summary(row) if row is not None else None  # while the next summary is read
            if planned is None:  # row by row (in the driver's queue behind the next summary)
                page = await conn.run_sync(read_page, after, limit, after + limit)
            else:
                count, positions, stands_for = planned
                page = Page(count, await conn.run_sync(_rows_of, positions), stands_for)
            after += limit
            yield page  # folded while the next summary is read
    finally:
        sys.setswitchinterval(switching)
        if pending is not None:  # a caller that stopped early: let the query end (a few ms), unread
            with contextlib.suppress(Exception):
                await pending


_SWITCH = 0.0005
"""The interpreter's switch interval while pages are read ahead (the default is 5 ms). The
driver's thread needs the GIL for a moment to start the next summary; with the default it waited
for most of the planning it was meant to run beside (1M events: 1.03-1.28 s wall for 1.1-1.2 s
of CPU, and 0.72-0.77 s with this, at 20,000 positions a page)."""


# Any: the aiosqlite connection and a summary row.
async def _read_ahead(driver: Any, after: int, limit: int, end: int) -> asyncio.Task[Any] | None:
    """The summary of positions ``(after, after + limit]`` on its way (None past ``end``)."""
    if after >= end:
        return None
    task = asyncio.ensure_future(_summary_row(driver, after, after + limit))
    await asyncio.sleep(0)  # one step: its query is on the driver's queue before what is awaited next
    return task


# Any: the aiosqlite connection and its rows.
async def _summary_row(driver: Any, after: int, upto: int) -> Any:
    """The page's summary row, or None where its text is not UTF-8 (row by row reads it as bytes)."""
    try:
        return (await driver.execute_fetchall(SUMMARY_SQL, (int(after), int(upto))))[0]
    except sqlite3.OperationalError:
        return None


def _rows_of(conn: Connection, positions: list[int]) -> list[tuple[Any, ...]]:  # Any: as in entries
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]  # None only once invalidated
    try:
        return _rows_at(conn, cursor, positions)
    finally:
        cursor.close()


# Any: a DBAPI cursor and module.
def _summary(cursor: Any, after: int, upto: int, dbapi: Any) -> Summary | None:
    try:
        cursor.execute(SUMMARY_SQL, (int(after), int(upto)))
        return plan_summary(cursor.fetchone())
    except dbapi.OperationalError:  # a BLOB payload that is not UTF-8: row by row reads it as bytes
        return None


# Any: a DBAPI cursor, and rows as in entries.
def _rows_at(
    conn: Connection, cursor: Any, positions: list[int], statements: dict[str, str] | None = None
) -> list[tuple[Any, ...]]:
    """The rows at ``positions`` (ascending), whole or (``statements``) as those select them."""
    found: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(positions), _CHUNK):
        chunk = positions[start : start + _CHUNK]
        sql = (statements or _ROWS_SQL)[conn.dialect.name].format(", ".join("?" * len(chunk)))
        cursor.execute(raw_sql(conn, sql), chunk)
        found.update((row[0], tuple(row)) for row in cursor.fetchall())
    return [found[position] for position in positions]


# Any: as in entries.
def _with_envelope(row: tuple[Any, ...], envelope: tuple[Any, ...]) -> tuple[Any, ...]:
    _, event_id, source, recorded_at = envelope
    return (row[0], event_id, row[2], row[3], row[4], row[5], source, recorded_at)


def fold_page(state: RouterState, page: Page) -> RouterState:
    """``state`` with a :func:`read_page` page folded: as ``fold_rows`` on the whole page."""
    for recorded, weight in zip(decode_rows(page.kept), page.stands_for, strict=True):
        state = fold_superseding(state, recorded, weight)
    return state
