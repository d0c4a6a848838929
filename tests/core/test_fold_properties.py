"""Properties of the fold over random event sequences."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.core import events as ev
from service.core.fold import fold, replay
from service.core.state import RouterState
from service.event_store.codec import dumps, format_time, to_recorded
from tests.core.strategies import T0, event_sequences


@settings(max_examples=300, deadline=None)
@given(event_sequences, st.data())
def test_fold_of_whole_log_equals_prefix_then_rest(events: list[ev.Recorded], data: st.DataObject) -> None:
    """Folding a prefix, then the rest, gives the same state as folding everything:
    the property snapshots and the live tail rely on."""
    cut = data.draw(st.integers(0, len(events)))
    whole = replay(events)
    assert replay(events[cut:], replay(events[:cut])) == whole
    assert whole.position == (events[-1].position if events else 0)


@settings(max_examples=100, deadline=None)
@given(event_sequences)
def test_redelivered_events_change_nothing(events: list[ev.Recorded]) -> None:
    """A tail that overlaps what was already folded (at-least-once delivery) is harmless."""
    once = replay(events)
    assert replay(events, once) == once


@settings(max_examples=100, deadline=None)
@given(event_sequences)
def test_fold_never_raises_and_status_is_always_defined(events: list[ev.Recorded]) -> None:
    """Surprising orders (ready before requested, progress for unknown jobs) are tolerated."""
    state = replay(events)
    for model in state.models.values():
        assert model.status is not None
        assert model.active_job is None or model.active_job in model.jobs


def _row(position: int, type_: str, version: int, data: dict[str, object]) -> tuple[object, ...]:
    return (
        position,
        f"id-{position}",
        type_,
        version,
        "org/a:Q4_K_M",
        dumps(data),
        dumps({"kind": "t"}),
        format_time(T0),
    )


def test_upcast_v1_progress_folds_like_current_version() -> None:
    """A stored v1 download_progress ({done, total}) folds exactly like its v2 form."""
    requested = to_recorded(
        _row(1, "download_requested", 1, {"job_id": "j", "repo": "org/a", "total_bytes": 1000, "files": []})
    )
    started = to_recorded(_row(2, "download_started", 1, {"job_id": "j", "pid": 7, "total_bytes": 1000}))
    v1 = to_recorded(_row(3, "download_progress", 1, {"job_id": "j", "done": 400, "total": 1000}))
    v2 = to_recorded(_row(3, "download_progress", 2, {"job_id": "j", "bytes_done": 400, "bytes_total": 1000}))
    assert v1.event == v2.event
    base = replay([requested, started])
    via_v1, via_v2 = fold(base, v1), fold(base, v2)
    assert via_v1 == via_v2
    job = via_v1.job("j")
    assert job is not None and job.bytes_done == 400 and job.bytes_total == 1000


def test_empty_replay_is_the_empty_state() -> None:
    assert replay([]) == RouterState()
