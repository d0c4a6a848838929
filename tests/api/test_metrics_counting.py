"""``RouterMetrics.on_folded`` counts what the events say: bytes fetched by this
run only (not what a resume found on disk, not twice when progress repeats), one
outcome per download, loads with their durations. Real event values, no service."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

from prometheus_client.parser import text_string_to_metric_families

from service.api.metrics import Gauges, RouterMetrics
from service.core import events as ev
from service.core.state import RouterState
from service.event_store.live_state import TailHealth

_positions = count(1)


def _fold(metrics: RouterMetrics, *events: ev.Event) -> None:
    for event in events:
        position = next(_positions)
        recorded = ev.Recorded(position, f"e{position}", "m", event, {}, datetime.now(UTC))
        metrics.on_folded(recorded, RouterState())


def _samples(metrics: RouterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render(TailHealth(True, 0, 0, 0.0, 0, None)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _metrics() -> RouterMetrics:
    return RouterMetrics(RouterState, Gauges(in_flight=lambda: 0, queued=lambda: 0))


def test_a_resumed_download_counts_only_the_bytes_it_fetched() -> None:
    metrics = _metrics()
    files: tuple[dict[str, object], ...] = ()
    _fold(
        metrics,
        ev.DownloadStarted(job_id="j", pid=1, commit="c", files=files, total_bytes=1000, resumed_bytes=400),
        ev.DownloadProgress(job_id="j", bytes_done=600, bytes_total=1000),
        ev.DownloadProgress(job_id="j", bytes_done=600, bytes_total=1000),
        ev.DownloadFinished(
            job_id="j", commit="c", files=files, bytes_total=1000, bytes_transferred=600, duration_ms=5.0
        ),
    )
    samples = _samples(metrics)
    assert samples[("modelrouter_download_bytes_total", ())] == 600
    assert samples[("modelrouter_downloads_total", (("outcome", "finished"),))] == 1
    assert samples[("modelrouter_downloads_total", (("outcome", "cancelled"),))] == 0


def test_failures_and_loads_are_counted_by_kind() -> None:
    metrics = _metrics()
    _fold(
        metrics,
        ev.DownloadFailed(job_id="j", reason="network", message="x"),
        ev.InstanceReady(
            instance_id="i", pid=1, endpoint="e", load_ms=1500.0, n_ctx=1, n_params=1, file_size=1, architecture="llama"
        ),
        ev.InstanceCrashed(instance_id="i", exit_code=None, signal=9, stderr_tail=""),
        ev.InstanceRequested(instance_id="i2", reason="restart", port=1),
        ev.InstanceLoadFailed(instance_id="i2", message="bad"),
    )
    samples = _samples(metrics)
    assert samples[("modelrouter_download_failures_total", (("reason", "network"),))] == 1
    assert samples[("modelrouter_downloads_total", (("outcome", "failed"),))] == 1
    assert samples[("modelrouter_loads_total", (("outcome", "ready"),))] == 1
    assert samples[("modelrouter_loads_total", (("outcome", "failed"),))] == 1
    assert samples[("modelrouter_load_duration_seconds_sum", ())] == 1.5
    assert samples[("modelrouter_load_duration_seconds_bucket", (("le", "2.5"),))] == 1
    assert samples[("modelrouter_load_duration_seconds_bucket", (("le", "1.0"),))] == 0
    assert samples[("modelrouter_instance_crashes_total", ())] == 1
    assert samples[("modelrouter_instance_restarts_total", ())] == 1
