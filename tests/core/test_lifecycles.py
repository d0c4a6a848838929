"""The lifecycles as data: the fold applies only allowed transitions, and the
decision functions answer every observation. Given events, when, then: no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from service.core import download_lifecycle as downloads
from service.core import events as ev
from service.core import instance_lifecycle as instances
from service.core.fold import replay
from service.core.processes import ProcessExit
from service.core.state import InstanceStatus, JobStatus, ModelConfig, RouterState
from service.core.transitions import mermaid
from tests.core.examples import example

T0 = datetime(2026, 1, 1, tzinfo=UTC)
M = "org/a-GGUF:Q4_K_M"
FILES = ({"path": "a.gguf", "size": 10, "sha256": "ab" * 32},)


def log(*entries: tuple[ev.Event, str | None] | ev.Event, start: datetime = T0) -> list[ev.Recorded]:
    """Recorded events one second apart; bare events belong to model ``M``."""
    out = []
    for i, entry in enumerate(entries, start=1):
        event, model = entry if isinstance(entry, tuple) else (entry, M)
        out.append(ev.Recorded(i, f"e{i}", model, event, {}, start + timedelta(seconds=i)))
    return out


def state_of(*entries: tuple[ev.Event, str | None] | ev.Event) -> RouterState:
    return replay(log(*entries))


AVAILABLE = ev.ModelDiscovered(source="models_dir", path="/m/a.gguf", files=({"path": "/m/a.gguf", "size": 1},), size=1)
READY = (
    AVAILABLE,
    ev.InstanceRequested(instance_id="i1", port=1),
    example(ev.InstanceLoading, instance_id="i1", pid=10),
    example(ev.InstanceReady, instance_id="i1", pid=10, endpoint="http://x"),
)


class TestInstanceTransitions:
    def test_a_second_instance_for_a_live_model_is_refused_and_counted(self) -> None:
        """instance_requested while one is live would orphan the first worker (the phantom of 11 §1.2)."""
        state = state_of(*READY, ev.InstanceRequested(instance_id="i2", port=2))
        assert state.models[M].instance is not None and state.models[M].instance.instance_id == "i1"
        assert state.anomalies == 1 and "instance_requested" in (state.last_anomaly or "")

    def test_model_removed_with_a_live_instance_keeps_the_instance(self) -> None:
        state = state_of(*READY, ev.ModelRemoved(files=("/m/a.gguf",)))
        assert state.models[M].instance is not None
        assert state.anomalies == 1

    def test_late_progress_from_a_killed_worker_is_ignored_without_an_anomaly(self) -> None:
        state = state_of(
            AVAILABLE,
            example(ev.InstanceRequested, instance_id="i1"),
            example(ev.InstanceLoadFailed, instance_id="i1", reason="load_timeout"),
            ev.LoadingProgress(instance_id="i1", progress=0.5),
        )
        assert state.models[M].instance is None and state.anomalies == 0

    def test_a_second_end_of_one_instance_is_an_anomaly(self) -> None:
        state = state_of(*READY, ev.InstanceStopped(instance_id="i1"), ev.InstanceStopped(instance_id="i1"))
        assert state.anomalies == 1

    def test_ready_after_a_stop_request_stays_stopping(self) -> None:
        state = state_of(
            AVAILABLE,
            example(ev.InstanceRequested, instance_id="i1"),
            ev.InstanceStopRequested(instance_id="i1", reason="unload"),
            example(ev.InstanceReady, instance_id="i1"),
        )
        inst = state.models[M].instance
        assert inst is not None and inst.status is InstanceStatus.STOPPING
        assert state.anomalies == 0

    def test_every_table_edge_folds_to_its_target(self) -> None:
        """Drive each (status, event) pair of the table from a state in that status."""
        reach: dict[InstanceStatus | None, tuple[ev.Event, ...]] = {
            None: (AVAILABLE,),
            InstanceStatus.STARTING: (AVAILABLE, example(ev.InstanceRequested, instance_id="i1")),
            InstanceStatus.LOADING: (
                AVAILABLE,
                example(ev.InstanceRequested, instance_id="i1"),
                example(ev.InstanceLoading, instance_id="i1"),
            ),
            InstanceStatus.READY: READY,
            InstanceStatus.STOPPING: (*READY, ev.InstanceStopRequested(instance_id="i1")),
        }
        for (source, kind), target in instances.INSTANCE_LIFECYCLE.table.items():
            event = example(ev.EVENT_TYPES[kind], instance_id="i1")
            state = state_of(*reach[source], event)  # type: ignore[index]  # sources are InstanceStatus | None
            inst = state.models[M].instance
            assert (inst.status if inst else None) is target, (source, kind)
            assert state.anomalies == 0, (source, kind)


class TestInstanceDecisions:
    def test_exit_while_stopping_is_a_stop_with_the_requested_reason(self) -> None:
        state = state_of(*READY, ev.InstanceStopRequested(instance_id="i1", reason="evicted"))
        [event] = instances.on_process_exit(state, M, "i1", ProcessExit(exit_code=None, signal=9, forced=True))
        assert isinstance(event, ev.InstanceStopped)
        assert (event.reason, event.exit_code, event.forced) == ("evicted", -9, True)

    def test_exit_nobody_asked_for_is_a_crash(self) -> None:
        [event] = instances.on_process_exit(state_of(*READY), M, "i1", ProcessExit(None, 11, stderr_tail="boom"))
        assert isinstance(event, ev.InstanceCrashed) and event.signal == 11 and event.stderr_tail == "boom"

    def test_exit_after_the_worker_recorded_its_end_records_nothing(self) -> None:
        state = state_of(*READY, ev.InstanceStopped(instance_id="i1"))
        assert instances.on_process_exit(state, M, "i1", ProcessExit(0, None)) == []

    def test_load_deadline_is_reset_by_progress(self) -> None:
        state = state_of(
            AVAILABLE,
            example(ev.InstanceRequested, instance_id="i1"),  # at T0+2s
            example(ev.InstanceLoading, instance_id="i1"),  # T0+3s
            ev.LoadingProgress(instance_id="i1", progress=0.4),  # T0+4s
        )
        assert instances.on_load_deadline(state, M, "i1", T0 + timedelta(seconds=13.9), timeout=10) == []
        [failed] = instances.on_load_deadline(state, M, "i1", T0 + timedelta(seconds=14), timeout=10)
        assert isinstance(failed, ev.InstanceLoadFailed) and failed.reason == "load_timeout"

    def test_a_ready_instance_has_no_load_deadline(self) -> None:
        assert instances.on_load_deadline(state_of(*READY), M, "i1", T0 + timedelta(days=1), timeout=10) == []

    def test_restart_backoff_grows_then_runs_out(self) -> None:
        config = ev.ModelConfigured(restart="on-failure")
        crashes: list[ev.Event] = []
        delays = []
        for attempt in range(1, instances.MAX_RESTARTS + 2):
            iid = f"i{attempt}"
            crashes += [
                example(ev.InstanceRequested, instance_id=iid),
                example(ev.InstanceCrashed, instance_id=iid, signal=9),
            ]
            model = state_of(AVAILABLE, config, *crashes).models[M]
            assert model.crash_count == attempt
            delays.append(instances.restart_delay(model, jitter=0.0))
        assert delays[: instances.MAX_RESTARTS] == sorted(delays[: instances.MAX_RESTARTS])
        assert delays[0] == 1.0 and delays[1] == 2.0
        assert delays[-1] is None  # ran out: the model stays failed

    def test_no_restart_without_the_policy(self) -> None:
        state = state_of(
            AVAILABLE, example(ev.InstanceRequested, instance_id="i1"), example(ev.InstanceCrashed, instance_id="i1")
        )
        assert state.models[M].config == ModelConfig()
        assert instances.restart_delay(state.models[M], jitter=0.0) is None

    def test_reconcile_loses_every_live_instance_once(self) -> None:
        closing = instances.reconcile(state_of(*READY), frozenset({"i1"}))
        assert [(m, type(e), e.killed_survivor) for m, e in closing] == [(M, ev.InstanceLost, True)]  # type: ignore[attr-defined]


def _job(*more: ev.Event) -> RouterState:
    return state_of(example(ev.DownloadRequested, job_id="j", repo="org/a-GGUF", files=FILES, total_bytes=10), *more)


class TestDownloadLifecycle:
    def test_a_second_terminal_event_is_an_anomaly(self) -> None:
        state = _job(example(ev.DownloadCancelled, job_id="j"), example(ev.DownloadCancelled, job_id="j"))
        job = state.job("j")
        assert job is not None and job.status is JobStatus.CANCELLED
        assert state.anomalies == 1

    def test_progress_after_the_end_is_late_not_an_anomaly(self) -> None:
        state = _job(
            example(ev.DownloadStarted, job_id="j"),
            example(ev.DownloadCancelled, job_id="j"),
            example(ev.DownloadProgress, job_id="j"),
        )
        assert state.anomalies == 0

    def test_cancel_of_a_queued_job_without_worker_ends_it_at_once(self) -> None:
        events = downloads.cancel(_job(), "j", discard=True, has_worker=False, bytes_on_disk=3)
        assert [type(e) for e in events] == [ev.DownloadCancelRequested, ev.DownloadCancelled]

    def test_cancel_with_a_worker_only_asks(self) -> None:
        events = downloads.cancel(
            _job(example(ev.DownloadStarted, job_id="j")), "j", discard=False, has_worker=True, bytes_on_disk=0
        )
        assert [type(e) for e in events] == [ev.DownloadCancelRequested]

    def test_cancel_of_an_ended_job_is_refused(self) -> None:
        from service.core.errors import CommandRejected

        with pytest.raises(CommandRejected, match="already cancelled"):
            downloads.cancel(
                _job(example(ev.DownloadCancelled, job_id="j")), "j", discard=False, has_worker=False, bytes_on_disk=0
            )

    @pytest.mark.parametrize(
        ("history", "shutting_down", "expected"),
        [
            ((example(ev.DownloadStarted, job_id="j"),), False, ev.DownloadFailed),
            ((example(ev.DownloadStarted, job_id="j"),), True, ev.DownloadInterrupted),
            (
                (example(ev.DownloadStarted, job_id="j"), ev.DownloadCancelRequested(job_id="j")),
                False,
                ev.DownloadCancelled,
            ),
            ((example(ev.DownloadStarted, job_id="j"), example(ev.DownloadFinished, job_id="j")), False, None),
        ],
    )
    def test_worker_exit_outcomes(
        self, history: Iterable[ev.Event], shutting_down: bool, expected: type | None
    ) -> None:
        events = downloads.on_worker_exit(
            _job(*history), "j", ProcessExit(None, 9), shutting_down=shutting_down, bytes_on_disk=5
        )
        assert [type(e) for e in events] == ([expected] if expected else [])

    def test_queued_jobs_start_in_request_order_within_the_cap(self) -> None:
        state = state_of(
            *[example(ev.DownloadRequested, job_id=f"j{i}", repo=f"org/m{i}", files=FILES) for i in range(4)]
        )
        assert [j.job_id for j in downloads.waiting_to_start(state, {"j0"}, max_running=2)] == ["j1"]
        assert [j.job_id for j in downloads.waiting_to_start(state, set(), max_running=0)] == ["j0", "j1", "j2", "j3"]

    def test_reconcile_honours_a_cancel_asked_before_the_crash(self) -> None:
        state = _job(example(ev.DownloadStarted, job_id="j"), ev.DownloadCancelRequested(job_id="j"))
        [(_, event)] = downloads.reconcile(state, {"j": 4})
        assert isinstance(event, ev.DownloadCancelled) and event.bytes_on_disk == 4


def test_docs_show_both_lifecycles_as_generated_from_the_tables() -> None:
    """docs/architecture.md embeds the diagrams mermaid() draws from the transition tables."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    for lifecycle in (instances.INSTANCE_LIFECYCLE, downloads.DOWNLOAD_LIFECYCLE):
        assert mermaid(lifecycle) in doc, f"regenerate the {lifecycle.name} diagram in docs/architecture.md"
