"""Leaving superseded progress events out of a replay gives the state folding all of them gives."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.core import events as ev
from service.core.fold import fold, replay
from service.core.state import RouterState
from service.core.superseding import SUPERSEDING, Entry, fold_superseding, plan
from tests.core.strategies import FIELDS, FILES, INSTANCES, JOBS, MODELS, envelopes, recorded_sequence

# Runs need many progress events of few subjects, some without a total (the zero_keeps rule).
_progress = st.one_of(
    st.builds(
        ev.DownloadProgress,
        job_id=st.sampled_from([JOBS[0], JOBS[0], JOBS[1]]),
        bytes_done=st.integers(0, 100),
        bytes_total=st.sampled_from([0, 0, 120]),  # 120: not the requested total
        bytes_per_second=st.one_of(st.none(), st.floats(0, 10)),
        eta_seconds=st.one_of(st.none(), st.floats(0, 10)),
    ),
    st.builds(
        ev.LoadingProgress,
        instance_id=st.sampled_from([INSTANCES[0], INSTANCES[0], INSTANCES[1]]),
        progress=st.floats(0, 1),
    ),
    st.builds(
        ev.InstanceStats,
        instance_id=st.sampled_from([INSTANCES[0], INSTANCES[0], INSTANCES[1]]),
        slots_total=st.integers(1, 4),
        slots_busy=st.integers(0, 4),
        queue_depth=st.integers(0, 9),
        prefill_tokens_per_s=st.floats(0, 100),
        decode_tokens_per_s=st.floats(0, 100),
        requests_finished=st.integers(0, 9),
    ),
)
_LIFECYCLE = [
    ev.DownloadRequested,
    ev.DownloadStarted,
    ev.DownloadFinished,
    ev.DownloadFailed,
    ev.DownloadCancelled,
    ev.DownloadInterrupted,
    ev.DownloadResumed,
    ev.InstanceRequested,
    ev.InstanceLoading,
    ev.InstanceReady,
    ev.InstanceStopRequested,
    ev.InstanceStopped,
    ev.InstanceCrashed,
]
"""What moves a job or an instance between statuses, in which progress is applied, late or refused."""


def _built(cls: type[ev.Event]) -> st.SearchStrategy[ev.Event]:
    names = {f.name for f in dataclasses.fields(cls)}
    return st.builds(cls, **{k: v for k, v in FIELDS.items() if k in names})


_moves = st.sampled_from(_LIFECYCLE).flatmap(_built)
_few_models = st.sampled_from([MODELS[0], MODELS[0], MODELS[1], None])
_PRELUDE = [
    ev.DownloadRequested(job_id=JOBS[0], repo="org/a", commit="c", files=FILES, total_bytes=100),  # type: ignore[arg-type]
    ev.DownloadStarted(job_id=JOBS[0], pid=7, commit="c", files=FILES, total_bytes=100),  # type: ignore[arg-type]
    ev.InstanceRequested(instance_id=INSTANCES[0], port=9000),
    ev.InstanceLoading(instance_id=INSTANCES[0], pid=8, endpoint="http://127.0.0.1:9000"),
]
"""A running job and a loading instance of the first model, so progress usually applies."""
_runs = st.tuples(st.sampled_from([MODELS[0], MODELS[0], MODELS[0], MODELS[1], None]), _progress)
_item = st.one_of(envelopes, st.tuples(_few_models, _moves), _runs, _runs, _runs)
progress_heavy = st.tuples(st.booleans(), st.lists(_item, min_size=30, max_size=100)).map(
    lambda drawn: recorded_sequence([(MODELS[0], e) for e in _PRELUDE if drawn[0]] + drawn[1])
)
"""Random logs, mostly lifecycle and progress events of few subjects (mutations of the plan fail here)."""


def entry(recorded: ev.Recorded) -> Entry:
    """What the replay reads of a row, taken from the decoded event (the reference)."""
    rule = SUPERSEDING.get(recorded.type)
    if rule is None:
        return recorded.model, None, False
    subject = getattr(recorded.event, rule.subject)
    run: Hashable = (recorded.type, subject)
    complete = rule.zero_keeps is None or getattr(recorded.event, rule.zero_keeps) != 0
    return recorded.model, run, complete


def fold_planned(events: list[ev.Recorded], state: RouterState | None = None) -> RouterState:
    current = state if state is not None else RouterState()
    for recorded, weight in zip(events, plan([entry(r) for r in events]), strict=True):
        if weight >= 0:
            current = fold_superseding(current, recorded, weight)
    return current


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # long logs, 2 busy cores
@given(progress_heavy)
def test_folding_the_plan_equals_folding_everything(events: list[ev.Recorded]) -> None:
    assert fold_planned(events) == replay(events)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(progress_heavy, st.data())
def test_the_plan_equals_folding_everything_from_any_state(events: list[ev.Recorded], data: st.DataObject) -> None:
    """Pages are planned one by one, each onto the state the previous pages left."""
    cut = data.draw(st.integers(0, len(events)))
    start = replay(events[:cut])
    assert fold_planned(events[cut:], start) == replay(events[cut:], start)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(progress_heavy)
def test_the_plan_keeps_every_event_that_is_not_superseded(events: list[ev.Recorded]) -> None:
    weights = plan([entry(r) for r in events])
    for recorded, weight in zip(events, weights, strict=True):
        if recorded.type not in SUPERSEDING:
            assert weight == 0
    assert sum(w for w in weights if w > 0) == weights.count(-1)  # each left-out event stood for once
    if events:
        assert weights[-1] >= 0  # the last event is folded: the state's position is the page's last


def _recorded(event: ev.Event) -> ev.Recorded:
    return recorded_sequence([("m", event)])[0]


def test_the_prelude_leaves_progress_something_to_change() -> None:
    state = replay(recorded_sequence([(MODELS[0], e) for e in _PRELUDE]))
    job, model = state.job(JOBS[0]), state.models[MODELS[0]]
    assert job is not None and job.status.active and job.bytes_total == 100
    assert model.instance is not None and model.instance.instance_id == INSTANCES[0]


def test_a_run_keeps_its_last_event_and_the_last_one_with_a_total() -> None:
    def progress(done: int, total: int) -> Entry:
        return entry(_recorded(ev.DownloadProgress(job_id="j", bytes_done=done, bytes_total=total)))

    other: Entry = ("m", None, False)  # any other event of the model
    elsewhere: Entry = ("n", None, False)  # an event of another model
    entries = [progress(1, 9), progress(2, 9), progress(3, 0), elsewhere, progress(4, 0), other, progress(5, 9)]
    # 0 is superseded by 1 (which has a total, as 4 has not); 2 by 4 (the run goes on across another
    # model's event); the model's own other event ends the run, so 6 is alone.
    assert plan(entries) == [-1, 1, -1, 0, 1, 0, 0]


def test_a_refused_event_counts_for_every_event_it_stands_for() -> None:
    # Progress for a job the log never saw: the same impossible transition, three times.
    events = recorded_sequence([("m", ev.DownloadProgress(job_id="j", bytes_done=i, bytes_total=9)) for i in range(3)])
    assert plan([entry(r) for r in events]) == [-1, -1, 2]
    expected = replay(events)
    assert expected.anomalies == 3
    assert fold_planned(events) == expected
    assert fold(RouterState(), events[-1]).anomalies == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(progress_heavy)
def test_consecutive_equal_entries_planned_as_one_get_what_their_last_gets(events: list[ev.Recorded]) -> None:
    """``plan``'s ``counts``: a reader may group a run's consecutive equal entries (the SQLite page
    summary does); each group gets what its last entry gets when every entry is planned."""
    entries = [entry(r) for r in events]
    groups: list[tuple[Entry, int, int]] = []  # entry, count, index of the last
    for index, found in enumerate(entries):
        if groups and found[1] is not None and groups[-1][0] == found:
            groups[-1] = (found, groups[-1][1] + 1, index)
        else:
            groups.append((found, 1, index))
    full = plan(entries)
    assert plan([g[0] for g in groups], [g[1] for g in groups]) == [full[g[2]] for g in groups]
