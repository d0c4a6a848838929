"""The replay's SQLite page summary (``replay_summary``) folds to the state of folding every row,
on random logs in a real SQLite database, and sends every page it cannot read for sure down the
row-by-row path, which then gives (or raises) what it always gave."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, create_engine
from sqlalchemy.pool import StaticPool

from service.core import events as ev
from service.core.fold import replay
from service.core.state import RouterState
from service.event_store import replay_summary
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import decode_rows, dumps
from service.event_store.replay import fold_page, planned_pages, read_page, read_range
from service.event_store.replay_summary import SUMMARY_SQL, plan_summary
from service.event_store.schema import metadata
from service.event_store.statements import head
from service.recovery.migrate import upgrade
from tests.core.test_superseding import progress_heavy
from tests.recovery.test_fast_decode import _row

_INSERT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_T = "2026-11-29T15:00:00.000001Z"


@contextmanager
def _log(rows: Sequence[tuple[Any, ...]]) -> Iterator[Connection]:
    """A real (in-memory) SQLite event log holding ``rows`` exactly as given."""
    engine = create_engine("sqlite://", poolclass=StaticPool)
    metadata.create_all(engine)
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.executemany(_INSERT, rows)
            yield conn
    finally:
        engine.dispose()


def _fold_pages(conn: Connection, sizes: Iterator[int]) -> RouterState:
    """The log folded in position ranges of the given sizes, as ``planned_pages`` reads them."""
    state, after, end = RouterState(), 0, head(conn)
    while after < end:
        upto = after + next(sizes)
        state = fold_page(state, read_range(conn, after, upto))
        after = upto
    return state


def _summaries(conn: Connection, size: int) -> list[replay_summary.Summary | None]:
    raw = conn.connection.dbapi_connection
    assert raw is not None
    out, after, end = [], 0, head(conn)
    while after < end:
        out.append(plan_summary(raw.execute(SUMMARY_SQL, (after, after + size)).fetchone()))
        after += size
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # 2 busy cores
@given(progress_heavy, st.data())
def test_pages_planned_from_their_summary_fold_to_folding_every_row(
    events: list[ev.Recorded], data: st.DataObject
) -> None:
    gaps = data.draw(st.lists(st.sampled_from([1, 1, 1, 2, 9]), min_size=len(events), max_size=len(events)))
    positions = list(itertools.accumulate(gaps))  # positions need not be consecutive
    rows = [(position, *_row(r)[1:]) for position, r in zip(positions, events, strict=True)]
    expected = replay(decode_rows(rows))
    with _log(rows) as conn:
        assert None not in _summaries(conn, 7)  # the store's own rows: never the row path
        sizes = iter(data.draw(st.lists(st.integers(1, 40), min_size=200, max_size=200)))
        assert _fold_pages(conn, sizes) == expected


def _progress(position: int, job: str = "j", done: int = 1, total: int = 9, model: Any = "m") -> tuple[Any, ...]:
    payload = dumps({"job_id": job, "bytes_done": done, "bytes_total": total})
    return (position, f"e{position}", "download_progress", 2, model, payload, "{}", _T)


def _started(position: int, model: Any = "m") -> tuple[Any, ...]:
    payload = dumps({"job_id": "j", "pid": 3, "total_bytes": 9})
    return (position, f"e{position}", "download_started", 1, model, payload, "{}", _T)


def _requested(position: int, model: Any = "m") -> tuple[Any, ...]:
    payload = dumps({"job_id": "j", "repo": "o/r", "total_bytes": 9})
    return (position, f"e{position}", "download_requested", 1, model, payload, "{}", _T)


def _odd_logs() -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Logs the summary cannot read for sure, each with a model holding a running job."""

    def job(model: Any, *progress: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return [_requested(1, model), _started(2, model), *progress]

    return [
        ("an empty model", job("", _progress(3, model=""), _progress(4, model=None), _progress(5, model=""))),
        ("a BLOB model", job("m", _progress(3), _progress(4, model=b"m"), _progress(5))),
        ("a model holding the separator", job("a\x1fb", _progress(3, model="a\x1fb"), _progress(4, model="a\x1fb"))),
        ("a subject that is a number", [*job("m"), (3, "e3", "download_progress", 2, "m", '{"job_id":7}', "{}", _T)]),
        (
            "a total that is text",
            [
                *job("m", _progress(3)),
                (4, "e4", "download_progress", 2, "m", '{"job_id":"j","bytes_done":2,"bytes_total":"9"}', "{}", _T),
                _progress(5),
            ],
        ),
        (
            "a BLOB payload",
            job("m", _progress(3), (4, *_progress(4)[1:5], _progress(4)[5].encode(), "{}", _T), _progress(5)),
        ),
    ]


@pytest.mark.parametrize(("case", "rows"), _odd_logs(), ids=[case for case, _ in _odd_logs()])
def test_a_log_the_summary_cannot_read_for_sure_folds_as_row_by_row(case: str, rows: list[tuple[Any, ...]]) -> None:
    expected = replay(decode_rows(rows))
    with _log(rows) as conn:
        if case != "a BLOB payload":  # read for sure: msgspec reads its text as it reads the bytes
            assert _summaries(conn, 100) == [None], case
        assert _fold_pages(conn, iter([100])) == expected, case
        assert _fold_pages(conn, iter([2] * 10)) == expected, case


def test_a_blob_payload_that_is_not_utf8_is_read_row_by_row() -> None:
    rows = [_requested(1), _started(2), (3, *_progress(3)[1:5], b'{"job_id":"\xff"}', "{}", _T), _progress(4)]
    with _log(rows) as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        with pytest.raises(sqlite3.OperationalError):  # what the summary meets
            raw.execute(SUMMARY_SQL, (0, 10)).fetchone()
        with pytest.raises(Exception) as plain:
            decode_rows(rows)
        with pytest.raises(type(plain.value)):  # row by row: kept (msgspec refuses it), then decoded
            _fold_pages(conn, iter([10]))


@pytest.mark.parametrize("data", ['{"job_id":"j","bytes_done":1,"bytes_total":9', "[1]"])  # not JSON; not an object
def test_a_superseded_row_that_does_not_decode_still_raises(data: str) -> None:
    rows = [_requested(1), _started(2), (3, "e3", "download_progress", 2, "m", data, "{}", _T), _progress(4)]
    with _log(rows) as conn:
        assert _summaries(conn, 10) == [None]
        with pytest.raises(Exception) as plain:
            decode_rows(rows)
        with pytest.raises(type(plain.value)):
            _fold_pages(conn, iter([10]))


def test_a_run_of_a_download_is_one_entry_and_its_last_row_is_kept() -> None:
    rows = [_requested(1), _started(2), *(_progress(p, done=p) for p in range(3, 50)), _progress(50, total=0)]
    with _log(rows) as conn:
        assert _summaries(conn, 100) == [(50, [1, 2, 49, 50], [0, 0, 46, 0])]
        assert _fold_pages(conn, iter([100])) == replay(decode_rows(rows))


def _mixed_log() -> list[tuple[Any, ...]]:
    """Two models' downloads in long interleaved runs, a gap in the positions, and a row that
    sends its page down the row path."""
    rows: list[tuple[Any, ...]] = [_requested(1, "a"), _started(2, "a"), _requested(3, "b"), _started(4, "b")]
    for position in range(5, 120):
        if 30 <= position < 45:  # a gap (positions are not always consecutive): whole pages of nothing
            continue
        if position == 61:  # a subject that is a number: kept, and refused by the fold (an anomaly)
            rows.append((position, f"e{position}", "download_progress", 2, "a", '{"job_id":7}', "{}", _T))
        else:
            rows.append(_progress(position, done=position, model="ab"[position % 3 == 0]))
    return rows


@pytest.mark.parametrize("size", [1, 3, 7, 50, 1000])
async def test_planned_pages_read_ahead_and_fold_to_folding_every_row(tmp_path: Path, size: int) -> None:
    """``planned_pages`` on a real SQLite file (the next summary read while a page is folded): every
    page size folds to the state of folding every row, across pages read row by row."""
    rows = _mixed_log()
    db = tmp_path / "log.db"
    upgrade(db)
    with contextlib.closing(sqlite3.connect(db)) as raw, raw:
        raw.executemany(_INSERT, rows)
    store = AsyncEventStore(db, source={"kind": "test"})
    try:
        conn = await store.watch_connection()
        try:
            state = RouterState()
            async with contextlib.aclosing(planned_pages(conn, 0, size)) as pages:
                async for page in pages:
                    state = fold_page(state, page)
        finally:
            await conn.close()
    finally:
        await store.close()
    assert state == replay(decode_rows(rows))
    assert state.anomalies >= 1 and state.position == 119


async def test_planned_pages_closed_early_leave_nothing_running(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    upgrade(db)
    with contextlib.closing(sqlite3.connect(db)) as raw, raw:
        raw.executemany(_INSERT, _mixed_log())
    store = AsyncEventStore(db, source={"kind": "test"})
    try:
        conn = await store.watch_connection()
        try:
            switching = sys.getswitchinterval()
            async with contextlib.aclosing(planned_pages(conn, 0, 10)) as pages:
                first = await anext(pages)
                assert sys.getswitchinterval() < switching  # the read-ahead's, while it reads
            assert sys.getswitchinterval() == switching
            assert first.count == 10
            assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()] == []
            page = await conn.run_sync(read_page, 0, 10)  # the connection is still usable
            assert page.kept == first.kept
        finally:
            await conn.close()
    finally:
        await store.close()
