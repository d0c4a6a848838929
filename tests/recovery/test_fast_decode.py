"""The replay fast paths (``codec.decode_rows``, the cached decoders, ``parse_time``,
``loads``, ``select_events``' raw path) give exactly what the reference decoding gives."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.core import events as ev
from service.core.fold import replay
from service.core.state import RouterState
from service.core.upcasting import decode
from service.event_store.codec import (
    TIME_FORMAT,
    NewEvent,
    decode_rows,
    dumps,
    format_time,
    loads,
    parse_time,
    to_recorded,
)
from service.event_store.replay import fold_rows
from service.event_store.statements import EventFilter
from service.event_store.sync_store import SyncEventStore
from tests.core.strategies import event_sequences
from tests.core.test_superseding import progress_heavy


def _reference(row: tuple[Any, ...]) -> ev.Recorded:
    """``to_recorded`` as it was before the fast paths."""
    position, event_id, type_, version, model, data, source, recorded_at = row
    return ev.Recorded(
        position=int(position),
        event_id=str(event_id),
        model=model,
        event=decode(type_, int(version), json.loads(data)),
        source=json.loads(source),
        recorded_at=datetime.strptime(recorded_at, TIME_FORMAT).replace(tzinfo=UTC),
    )


def _row(rec: ev.Recorded) -> tuple[Any, ...]:
    return (
        rec.position,
        rec.event_id,
        rec.type,
        rec.event.VERSION,
        rec.model,
        dumps(rec.event.to_data()),
        dumps(dict(rec.source)),
        format_time(rec.recorded_at),
    )


@settings(max_examples=200, deadline=None)
@given(event_sequences)
def test_decode_rows_and_to_recorded_equal_the_reference(events: list[ev.Recorded]) -> None:
    rows = [_row(r) for r in events]
    expected = [_reference(r) for r in rows]
    assert decode_rows(rows) == expected
    assert [to_recorded(r) for r in rows] == expected


def test_old_versions_and_odd_payloads_take_the_reference_path() -> None:
    t = "2026-11-29T15:00:00.000001Z"
    rows = [
        (1, "a", "download_progress", 1, "m", '{"job_id":"j","done":4,"total":9}', "{}", t),  # upcast v1
        (2, "b", "model_discovered", 1, "m", '{"files":[{"path":"x"}],"extra":1}', '{"k":[1]}', t),  # list, unknown key
        (3, "c", "router_started", 1, None, ' {"pid": 3} ', '{"kind":"x"}', t),  # whitespace around JSON
    ]
    assert decode_rows(rows) == [_reference(r) for r in rows]
    assert isinstance(decode_rows(rows)[1].event.files, tuple)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "row",
    [
        (1, "a", "no_such_type", 1, None, "{}", "{}", "2026-11-29T15:00:00.000000Z"),
        (1, "a", "router_started", 9, None, "{}", "{}", "2026-11-29T15:00:00.000000Z"),
        (1, "a", "router_started", 1, None, "[1]", "{}", "2026-11-29T15:00:00.000000Z"),
        (1, "a", "router_started", 1, None, '{"pid":1', "{}", "2026-11-29T15:00:00.000000Z"),
        (1, "a", "router_started", 1, None, "{}", "{}", "2026-11-29 15:00:00.000000Z"),
    ],
)
def test_bad_rows_raise_what_the_reference_raises(row: tuple[Any, ...]) -> None:
    with pytest.raises(Exception) as reference:
        _reference(row)
    with pytest.raises(type(reference.value)):
        decode_rows([row])
    with pytest.raises(type(reference.value)):
        to_recorded(row)


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-29T15:00:00.123456Z",
        "2026-02-29T15:00:00.123456Z",  # not a leap year
        "2026-11-29T24:00:00.000000Z",
        "2026-11-29T15:00:00,123456Z",
        "2026-11-29T15:00:00.12345Z",
        "2026-11-29T15:00:00.1234567",
        "\uff12026-11-29T15:00:00.123456Z",  # a fullwidth digit
    ],
)
def test_parse_time_accepts_and_rejects_like_strptime(text: str) -> None:
    try:
        expected: object = datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        with pytest.raises(ValueError):
            parse_time(text)
        return
    assert parse_time(text) == expected
    assert parse_time(text).utcoffset() is not None


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=10,
    )
)
def test_loads_equals_json_loads(value: object) -> None:
    for text in (dumps(value), json.dumps(value), f" {json.dumps(value)}\n"):
        assert loads(text) == json.loads(text)


def test_select_events_plain_page_equals_filtered_query(db_path: Path) -> None:
    """The raw-cursor path (after/limit only) returns what the SQLAlchemy path returns."""
    store = SyncEventStore(db_path, source={"kind": "test"})
    try:
        store.append(
            [
                NewEvent(ev.RouterStarted(pid=i, version="0.1", host="127.0.0.1", port=8080), model=f"m{i % 2}")
                for i in range(30)
            ]
        )
        raw = store.read(EventFilter(after=4, limit=10))
        via_sqlalchemy = store.read(EventFilter(after=4, before=10_000, limit=10))
        assert raw == via_sqlalchemy and [r.position for r in raw] == list(range(5, 15))
        assert store.read(EventFilter(limit=3)) == store.read(EventFilter(before=10_000, limit=3))
    finally:
        store.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # 2 busy cores
@given(progress_heavy, st.data())
def test_fold_rows_equals_folding_every_decoded_row(events: list[ev.Recorded], data: st.DataObject) -> None:
    """The replay's fast path, page by page, gives the state of folding every row (some rows
    stored as v1 progress, which take part in no run)."""
    rows = [_row(r) for r in events]
    for i, rec in enumerate(events):
        if isinstance(rec.event, ev.DownloadProgress) and data.draw(st.integers(0, 5)) == 0:
            v1 = {"job_id": rec.event.job_id, "done": rec.event.bytes_done, "total": rec.event.bytes_total}
            rows[i] = (*rows[i][:3], 1, rows[i][4], dumps(v1), *rows[i][6:])
    expected = replay(decode_rows(rows))
    state, at = RouterState(), 0
    while at < len(rows):
        size = data.draw(st.integers(1, 40))
        state = fold_rows(state, rows[at : at + size])
        at += size
    assert state == expected


@pytest.mark.parametrize("data", ['{"job_id":"j","bytes_done":1,"bytes_total":9', "[1]"])  # not JSON; not an object
def test_a_superseded_row_that_does_not_decode_still_raises(data: str) -> None:
    t = "2026-11-29T15:00:00.000001Z"
    good = '{"job_id":"j","bytes_done":2,"bytes_total":9}'
    rows = [(1, "a", "download_progress", 2, "m", data, "{}", t), (2, "b", "download_progress", 2, "m", good, "{}", t)]
    with pytest.raises(Exception) as plain:
        decode_rows(rows)
    with pytest.raises(type(plain.value)):
        fold_rows(RouterState(), rows)


def test_a_row_read_tolerantly_is_folded_as_before() -> None:
    """A subject that is not a string takes part in no run: decoded and folded as the plain path does."""
    t = "2026-11-29T15:00:00.000001Z"
    rows = [
        (1, "a", "download_requested", 1, "m", dumps({"job_id": 7, "repo": "o/r", "total_bytes": 9}), "{}", t),
        (2, "b", "download_started", 1, "m", dumps({"job_id": 7, "pid": 3, "total_bytes": 9}), "{}", t),
        (3, "c", "download_progress", 2, "m", '{"job_id":7,"bytes_done":1,"bytes_total":9}', "{}", t),
        (4, "d", "download_progress", 2, "m", '{"job_id":7,"bytes_done":2,"bytes_total":0}', "{}", t),
    ]
    expected = replay(decode_rows(rows))
    assert fold_rows(RouterState(), rows) == expected
    assert expected.anomalies == 3  # the job's id is read as the number 7: its start and progress are refused
