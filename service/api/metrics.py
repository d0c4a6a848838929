"""The router's own ``GET /metrics`` (Prometheus text), two kinds of series:

* **Gauges read from the fold at scrape time** (:class:`_FoldCollector`): models
  and instances by status, download jobs by status, each node's device memory, each model's saved
  prompt cache (bytes on disk, restored tokens: a counter the log keeps whole),
  requests in flight, the queue, the log position and the tail's lag. No second copy of the state to
  drift from the first: the scrape renders what ``GET /models`` would.
* **Counters and histograms fed by the events themselves** (:meth:`RouterMetrics.on_folded`,
  a :class:`~service.event_store.live_state.LiveState` listener): loads and their durations,
  crashes, restarts, stops, downloads by outcome, bytes downloaded, proxied
  requests and their latency, and per model (:mod:`service.api.model_metrics`). They count from this process's start, as
  Prometheus expects of a counter (``rate()`` handles the reset); the log keeps
  the whole history. Only the queue wait is timed outside the log: no event
  records it (:meth:`RouterMetrics.observe_queue_wait`).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.api.model_metrics import ModelSeries
from service.core import events as ev
from service.core.devices import shown_node
from service.core.state import InstanceStatus, JobStatus, ModelStatus, RouterState
from service.event_store.live_state import TailHealth

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PREFIX = "modelrouter"
# A tiny GGUF loads in ~0.1 s, a 7B one in tens of seconds: buckets span both.
_LOAD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Gauges:
    """What the fold cannot say and the scrape reads live: set by the API before rendering."""

    def __init__(
        self,
        in_flight: Callable[[], int],
        queued: Callable[[], int],
        busy: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.in_flight = in_flight
        self.queued = queued
        self.busy = busy  # requests in flight by model
        self.tail: TailHealth | None = None


class _FoldCollector(Collector):
    def __init__(self, state: Callable[[], RouterState], gauges: Gauges) -> None:
        self._state = state
        self._gauges = gauges

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        models = GaugeMetricFamily(f"{_PREFIX}_models", "Listed models by status", labels=["status"])
        by_status = Tally(m.status for m in state.models.values() if m.listed and not m.config.hidden)
        for status in ModelStatus:
            if status is not ModelStatus.ABSENT:
                models.add_metric([status.value], by_status[status])
        yield models
        instances = GaugeMetricFamily(f"{_PREFIX}_instances", "Inference workers by status", labels=["status"])
        by_instance = Tally(m.instance.status for m in state.models.values() if m.instance is not None)
        for inst_status in InstanceStatus:
            instances.add_metric([inst_status.value], by_instance[inst_status])
        yield instances
        jobs = GaugeMetricFamily(f"{_PREFIX}_download_jobs", "Download jobs in the log by status", labels=["status"])
        by_job = Tally(job.status for job in state.all_jobs())
        for job_status in JobStatus:
            jobs.add_metric([job_status.value], by_job[job_status])
        yield jobs
        yield _device_memory(state)
        yield from _prompt_cache(state)
        yield _gauge("requests_in_flight", "Proxied requests holding a model now", self._gauges.in_flight())
        yield _gauge("queue_length", "Requests waiting for a model slot", self._gauges.queued())
        yield _gauge("event_log_position", "Position of the last event folded into the live state", state.position)
        yield _gauge("fold_anomalies", "Impossible transitions the fold refused (0 unless a bug)", state.anomalies)
        tail = self._gauges.tail
        if tail is not None:
            yield _gauge("event_log_head", "Position of the last event committed to the log", tail.head)
            yield _gauge("tail_lag_events", "Events committed but not yet folded", tail.lag_events)
            yield _gauge("tail_lag_seconds", "Age of the oldest unfolded event (or tail downtime)", tail.lag_ms / 1000)
            yield _gauge("tail_up", "1 while the tail keeping the state current runs", int(tail.up))
            yield _gauge("tail_restarts", "Times the tail was restarted after a failure", tail.restarts)


def _device_memory(state: RouterState) -> GaugeMetricFamily:
    """Each node's devices as its ``node_devices_measured`` found them at its start (``node``: ``--node``'s
    name, ``local`` for a service without one, as ``GET /nodes`` shows it)."""
    family = GaugeMetricFamily(
        f"{_PREFIX}_device_memory_bytes",
        "Memory of each compute device, total and free when the node started",
        labels=["node", "device", "kind"],
    )
    for node, measured in sorted(state.devices.items()):
        for device in measured.devices:
            family.add_metric([shown_node(node), device.name, "total"], device.total_bytes)
            family.add_metric([shown_node(node), device.name, "free"], device.free_bytes)
    return family


def _prompt_cache(state: RouterState) -> Iterator[Metric]:
    """Each model's saved prompt cache (issue 35): its bytes on disk as the log records them, and the
    tokens its workers restored, a counter over the whole log (the fold's, so it never resets)."""
    restored = CounterMetricFamily(
        f"{_PREFIX}_prompt_cache_restored_tokens", "Prompt tokens restored from a saved prompt cache", labels=["model"]
    )
    on_disk = GaugeMetricFamily(
        f"{_PREFIX}_prompt_cache_bytes", "Bytes of saved prompt cache on disk, per model", labels=["model"]
    )
    for name, model in sorted(state.models.items()):
        if model.prompt_cache or model.prompt_cache_restored_tokens:
            restored.add_metric([name], model.prompt_cache_restored_tokens)
            on_disk.add_metric([name], sum(entry.bytes for entry in model.prompt_cache.values()))
    yield restored
    yield on_disk


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{_PREFIX}_{name}", documentation, value=value)


class RouterMetrics:
    """One registry per service (never the global one: tests run several apps in one process)."""

    def __init__(self, state: Callable[[], RouterState], gauges: Gauges) -> None:
        self.gauges = gauges
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_FoldCollector(state, gauges))
        self.models = ModelSeries(state, gauges.busy, _LATENCY_BUCKETS)
        self.registry.register(self.models)
        r = self.registry
        self.loads = Counter(f"{_PREFIX}_loads", "Model loads by outcome", ["outcome"], registry=r)
        self.load_seconds = Histogram(
            f"{_PREFIX}_load_duration_seconds", "Time from spawn to ready", buckets=_LOAD_BUCKETS, registry=r
        )
        self.crashes = Counter(f"{_PREFIX}_instance_crashes", "Inference workers that died unasked", registry=r)
        self.restarts = Counter(f"{_PREFIX}_instance_restarts", "Instances started again after a crash", registry=r)
        self.stops = Counter(f"{_PREFIX}_instance_stops", "Instances stopped, by reason", ["reason"], registry=r)
        self.downloads = Counter(f"{_PREFIX}_downloads", "Downloads ended, by outcome", ["outcome"], registry=r)
        self.download_failures = Counter(
            f"{_PREFIX}_download_failures", "Failed downloads by reason", ["reason"], registry=r
        )
        self.bytes = Counter(f"{_PREFIX}_download_bytes", "Bytes fetched by download workers", registry=r)
        self.requests = Counter(
            f"{_PREFIX}_proxied_requests", "Requests proxied to workers", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            f"{_PREFIX}_proxied_request_duration_seconds",
            "Proxied request time, queue wait and streaming included",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            f"{_PREFIX}_queue_wait_seconds",
            "Time a proxied request waited for a ready model (load included)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # Per running job: the bytes already counted, so progress adds only its delta.
        self._counted: dict[str, int] = {}
        for outcome in ("ready", "failed"):  # present at 0 from the first scrape, as alerts expect
            self.loads.labels(outcome)
        for outcome in ("finished", "failed", "cancelled", "interrupted"):
            self.downloads.labels(outcome)

    def observe_queue_wait(self, seconds: float) -> None:
        self.queue_wait.observe(seconds)

    def on_folded(self, recorded: ev.Recorded, _state: RouterState) -> None:
        """The LiveState listener: cheap, never blocks."""
        self.models.on_folded(recorded)
        e = recorded.event
        if isinstance(e, ev.InstanceReady):
            self.loads.labels("ready").inc()
            self.load_seconds.observe(e.load_ms / 1000)
        elif isinstance(e, ev.InstanceLoadFailed):
            self.loads.labels("failed").inc()
        elif isinstance(e, ev.InstanceCrashed):
            self.crashes.inc()
        elif isinstance(e, ev.InstanceRequested) and e.reason == "restart":
            self.restarts.inc()
        elif isinstance(e, ev.InstanceStopped):
            self.stops.labels(e.reason).inc()
        elif isinstance(e, ev.RequestCompleted):
            self.requests.labels(e.route, str(e.status_code)).inc()
            self.latency.labels(e.route).observe(e.duration_ms / 1000)
        else:
            self._on_download(e)

    def _on_download(self, e: ev.Event) -> None:
        if isinstance(e, ev.DownloadStarted):
            self._counted[e.job_id] = e.resumed_bytes  # already on disk: not fetched by this run
        elif isinstance(e, ev.DownloadProgress):
            self._count_bytes(e.job_id, e.bytes_done)
        elif isinstance(e, ev.DownloadFinished):
            self._count_bytes(e.job_id, e.bytes_total)
            self._end(e.job_id, "finished")
        elif isinstance(e, ev.DownloadFailed):
            self.download_failures.labels(e.reason).inc()
            self._end(e.job_id, "failed")
        elif isinstance(e, ev.DownloadCancelled):
            self._end(e.job_id, "cancelled")
        elif isinstance(e, ev.DownloadInterrupted):
            self._end(e.job_id, "interrupted")

    def _count_bytes(self, job_id: str, done: int) -> None:
        counted = self._counted.get(job_id)
        if counted is not None and done > counted:
            self.bytes.inc(done - counted)
            self._counted[job_id] = done

    def _end(self, job_id: str, outcome: str) -> None:
        self._counted.pop(job_id, None)
        self.downloads.labels(outcome).inc()

    def render(self, tail: TailHealth) -> bytes:
        """The exposition text; ``tail`` is read (async) by the caller just before."""
        self.gauges.tail = tail
        return generate_latest(self.registry)
