"""``model_history``: hand-built event lists in, the timeline a reader expects out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.core import events as ev
from service.core.history import model_history
from tests.core.examples import example

M = "org/m-GGUF:Q4_K_M"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def log(*items: tuple[float, ev.Event] | tuple[float, ev.Event, str]) -> list[ev.Recorded]:
    """(seconds after T0, event[, model]) -> records in that order."""
    return [
        ev.Recorded(i, f"e{i}", item[2] if len(item) == 3 else M, item[1], {}, T0 + timedelta(seconds=item[0]))
        for i, item in enumerate(items, 1)
    ]


class TestDownloads:
    def test_finished_download_has_duration_bytes_and_outcome(self) -> None:
        """A download that finished: when, how long, how many bytes, finished."""
        records = log(
            (0, example(ev.DownloadRequested, job_id="j1", total_bytes=1000, quant="Q4_K_M")),
            (1, example(ev.DownloadStarted, job_id="j1", resumed_bytes=0)),
            (2, example(ev.DownloadProgress, job_id="j1", bytes_done=500, bytes_total=1000)),
            (4.5, example(ev.DownloadFinished, job_id="j1", bytes_total=1000, bytes_transferred=1000)),
        )
        (job,) = model_history(M, records, T0).downloads
        assert (job.outcome, job.reason, job.quant) == ("finished", None, "Q4_K_M")
        assert (job.bytes_done, job.bytes_transferred, job.duration_seconds) == (1000, 1000, 4.5)
        assert job.requested_at == T0

    def test_cancelled_then_resumed_by_a_second_job(self) -> None:
        """Cancel keeps the partial; the next job says how much it found."""
        records = log(
            (0, example(ev.DownloadRequested, job_id="j1", total_bytes=1000)),
            (1, example(ev.DownloadProgress, job_id="j1", bytes_done=300, bytes_total=1000)),
            (2, example(ev.DownloadCancelRequested, job_id="j1")),
            (3, example(ev.DownloadCancelled, job_id="j1", bytes_on_disk=320)),
            (10, example(ev.DownloadRequested, job_id="j2", total_bytes=1000)),
            (11, example(ev.DownloadStarted, job_id="j2", resumed_bytes=320)),
        )
        first, second = model_history(M, records, T0).downloads
        assert (first.outcome, first.bytes_done, first.duration_seconds) == ("cancelled", 320, 3.0)
        assert (second.outcome, second.resumed_bytes, second.ended_at) == ("running", 320, None)

    def test_failure_keeps_reason_and_message(self) -> None:
        records = log(
            (0, example(ev.DownloadRequested, job_id="j1")),
            (1, example(ev.DownloadFailed, job_id="j1", reason="network", message="reset by peer")),
        )
        (job,) = model_history(M, records, T0).downloads
        assert (job.outcome, job.reason, job.message) == ("failed", "network", "reset by peer")

    def test_interrupted_job_resumed_under_the_same_id_is_running_again(self) -> None:
        records = log(
            (0, example(ev.DownloadRequested, job_id="j1")),
            (1, example(ev.DownloadInterrupted, job_id="j1", bytes_on_disk=40, reason="shutdown")),
            (5, example(ev.DownloadResumed, job_id="j1", bytes_on_disk=40)),
        )
        (job,) = model_history(M, records, T0).downloads
        assert (job.outcome, job.reason, job.ended_at) == ("running", None, None)


class TestLoads:
    def test_load_crash_restart_unload(self) -> None:
        """Load, serve two requests, crash on a signal, restart, unload: each load says how it ended."""
        records = log(
            (0, example(ev.InstanceRequested, instance_id="i1", reason="load")),
            (1, example(ev.InstanceLoading, instance_id="i1", pid=11)),
            (2, example(ev.InstanceReady, instance_id="i1", pid=11, load_ms=900.0)),
            (3, example(ev.RequestCompleted, instance_id="i1")),
            (4, example(ev.RequestCompleted, instance_id="i1")),
            (12, example(ev.InstanceCrashed, instance_id="i1", exit_code=None, signal=9)),
            (13, example(ev.InstanceRequested, instance_id="i2", reason="restart")),
            (14, example(ev.InstanceReady, instance_id="i2", pid=12)),
            (20, example(ev.InstanceStopRequested, instance_id="i2", reason="idle")),
            (21, example(ev.InstanceStopped, instance_id="i2", reason="unload", exit_code=0)),
        )
        history = model_history(M, records, T0 + timedelta(seconds=100))
        first, second = history.loads
        assert (first.ended, first.signal, first.requests_served, first.uptime_seconds) == ("crashed", 9, 2, 10.0)
        assert (first.pid, first.load_ms) == (11, 900.0)
        assert (second.reason, second.ended, second.exit_code, second.uptime_seconds) == ("restart", "idle", 0, 7.0)
        assert (history.restarts, history.crashes, history.requests_served) == (1, 1, 2)

    def test_running_instance_counts_uptime_to_now(self) -> None:
        records = log(
            (0, example(ev.InstanceRequested, instance_id="i1")),
            (2, example(ev.InstanceReady, instance_id="i1")),
        )
        (load,) = model_history(M, records, T0 + timedelta(seconds=32)).loads
        assert (load.ended, load.ended_at, load.uptime_seconds) == ("running", None, 30.0)

    def test_load_failure_and_eviction(self) -> None:
        records = log(
            (0, example(ev.InstanceRequested, instance_id="i1")),
            (1, example(ev.InstanceLoadFailed, instance_id="i1", reason="corrupt", message="bad tensor")),
            (2, example(ev.InstanceRequested, instance_id="i2", reason="autoload")),
            (3, example(ev.InstanceReady, instance_id="i2")),
            (4, example(ev.InstanceStopRequested, instance_id="i2", reason="evicted")),
            (5, example(ev.InstanceStopped, instance_id="i2")),
        )
        failed, evicted = model_history(M, records, T0).loads
        assert (failed.ended, failed.message, failed.uptime_seconds) == ("load_failed", "corrupt: bad tensor", None)
        assert (evicted.reason, evicted.ended) == ("autoload", "evicted")

    def test_still_loading_has_no_uptime(self) -> None:
        (load,) = model_history(M, log((0, example(ev.InstanceRequested, instance_id="i1"))), T0).loads
        assert (load.ended, load.uptime_seconds) == ("loading", None)


def test_other_models_and_unknown_ids_are_ignored() -> None:
    records = log(
        (0, example(ev.DownloadRequested, job_id="j1"), "other/x-GGUF:Q8_0"),
        (1, example(ev.InstanceReady, instance_id="never-requested")),
        (2, example(ev.DownloadFinished, job_id="j1")),
    )
    history = model_history(M, records, T0)
    assert (history.downloads, history.loads, history.requests_served) == ((), (), 0)
