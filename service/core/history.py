"""A model's life story from its events: every download, every load, and its saved prompt cache.

Pure (stdlib only): ``model_history(records, now)`` folds one model's events
into a timeline for ``GET /models/{id}/history`` and ``modelrouter history``.
It reads what the log says and never guesses: a load with no end yet is
``running`` (uptime counted to ``now``), a download with no outcome yet is
``running``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime

import service.core.events as ev
from service.core.events import Recorded

# The event types the timeline reads: the service asks the store for these only.
HISTORY_TYPES = ("download_*", "instance_*", "request_completed", "prompt_cache_*")


@dataclasses.dataclass(frozen=True, slots=True)
class DownloadRecord:
    """One download job, from ``download_requested`` to its outcome."""

    job_id: str
    requested_at: datetime
    revision: str
    quant: str | None
    bytes_total: int
    outcome: str = "running"  # running | finished | failed | cancelled | interrupted
    reason: str | None = None  # failed: its reason; interrupted: router_restart | shutdown
    message: str | None = None
    resumed_bytes: int = 0  # already on disk when a worker started (largest over resumes)
    bytes_done: int = 0  # on disk at the last word: progress, finished or cancelled
    bytes_transferred: int | None = None  # fetched by this job (finished only)
    ended_at: datetime | None = None
    duration_seconds: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class LoadRecord:
    """One inference instance, from ``instance_requested`` to how it ended."""

    instance_id: str
    requested_at: datetime
    reason: str  # load | autoload | restart | startup
    pid: int | None = None
    ready_at: datetime | None = None
    load_ms: float | None = None
    requests_served: int = 0
    # running | loading | unload | evicted | idle | shutdown | remove | reload |
    # crashed | load_failed | lost: the stop reason the service asked for, or what happened.
    ended: str = "loading"
    ended_at: datetime | None = None
    uptime_seconds: float | None = None  # ready to end (or to now while running)
    exit_code: int | None = None
    signal: int | None = None
    message: str | None = None
    node: str | None = None  # in a cluster: the node that ran it (whose disk holds its log)


@dataclasses.dataclass(frozen=True, slots=True)
class PromptCacheRecord:
    """One save, restore or discard of a saved prompt-cache file (issue 35)."""

    at: datetime
    action: str  # saved | restored | discarded
    file: str
    tokens: int | None = None
    bytes: int = 0
    instance_id: str | None = None  # the worker that saved, restored or found it (None: the service)
    reason: str | None = None  # discarded: model_changed, settings_changed, corrupt, budget, model_removed
    lazy: bool | None = None  # restored: on the first request that needed it


@dataclasses.dataclass(frozen=True, slots=True)
class ModelHistory:
    """The timeline, oldest first, with the totals a reader asks for first."""

    model: str
    downloads: tuple[DownloadRecord, ...]
    loads: tuple[LoadRecord, ...]
    restarts: int
    crashes: int
    requests_served: int
    prompt_cache: tuple[PromptCacheRecord, ...] = ()


def _prompt_cache(rec: Recorded) -> PromptCacheRecord | None:
    e, at = rec.event, rec.recorded_at
    match e:
        case ev.PromptCacheSaved():
            return PromptCacheRecord(at, "saved", e.file, e.tokens, e.bytes, e.instance_id)
        case ev.PromptCacheRestored():
            return PromptCacheRecord(at, "restored", e.file, e.tokens, e.bytes, e.instance_id, lazy=e.lazy)
        case ev.PromptCacheDiscarded():
            return PromptCacheRecord(at, "discarded", e.file, None, e.bytes, e.instance_id, reason=e.reason)
    return None


def _seconds(start: datetime, end: datetime) -> float:
    return round(max(0.0, (end - start).total_seconds()), 3)


def _end(job: DownloadRecord, rec: Recorded, outcome: str, bytes_done: int) -> DownloadRecord:
    took = _seconds(job.requested_at, rec.recorded_at)
    return dataclasses.replace(
        job, outcome=outcome, bytes_done=bytes_done, ended_at=rec.recorded_at, duration_seconds=took
    )


def _download(job: DownloadRecord, rec: Recorded) -> DownloadRecord:
    e = rec.event
    match e:
        case ev.DownloadStarted():
            return dataclasses.replace(job, resumed_bytes=max(job.resumed_bytes, e.resumed_bytes), outcome="running")
        case ev.DownloadResumed():
            return dataclasses.replace(job, outcome="running", reason=None, ended_at=None, duration_seconds=None)
        case ev.DownloadProgress():
            return dataclasses.replace(job, bytes_done=e.bytes_done, bytes_total=e.bytes_total or job.bytes_total)
        case ev.DownloadFinished():
            finished = _end(job, rec, "finished", e.bytes_total)
            return dataclasses.replace(finished, bytes_transferred=e.bytes_transferred)
        case ev.DownloadFailed():
            return dataclasses.replace(_end(job, rec, "failed", job.bytes_done), reason=e.reason, message=e.message)
        case ev.DownloadCancelled():
            return _end(job, rec, "cancelled", e.bytes_on_disk)
        case ev.DownloadInterrupted():
            return dataclasses.replace(_end(job, rec, "interrupted", e.bytes_on_disk), reason=e.reason)
    return job


def _ended(
    load: LoadRecord,
    rec: Recorded,
    how: str,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    message: str | None = None,
) -> LoadRecord:
    uptime = _seconds(load.ready_at, rec.recorded_at) if load.ready_at is not None else None
    return dataclasses.replace(
        load,
        ended=how,
        ended_at=rec.recorded_at,
        uptime_seconds=uptime,
        exit_code=exit_code,
        signal=signal,
        message=message,
    )


def _load(load: LoadRecord, rec: Recorded, stop_reason: str | None) -> LoadRecord:
    e = rec.event
    match e:
        case ev.InstanceLoading():
            return dataclasses.replace(load, pid=e.pid)
        case ev.InstanceReady():
            return dataclasses.replace(load, pid=e.pid, ready_at=rec.recorded_at, load_ms=e.load_ms, ended="running")
        case ev.InstanceLoadFailed():
            return _ended(load, rec, "load_failed", message=f"{e.reason}: {e.message}")
        case ev.InstanceStopped():
            # The reason asked for (eviction, idle TTL...) is the story; the worker's echo may be generic.
            return _ended(load, rec, stop_reason or e.reason, exit_code=e.exit_code)
        case ev.InstanceCrashed():
            return _ended(load, rec, "crashed", exit_code=e.exit_code, signal=e.signal)
        case ev.InstanceLost():
            return _ended(load, rec, "lost", message=e.reason)
        case ev.RequestCompleted():
            return dataclasses.replace(load, requests_served=load.requests_served + 1)
    return load


def _running_uptime(load: LoadRecord, now: datetime) -> LoadRecord:
    if load.ended == "running" and load.ready_at is not None:
        return dataclasses.replace(load, uptime_seconds=_seconds(load.ready_at, now))
    return load


def model_history(model: str, records: Iterable[Recorded], now: datetime) -> ModelHistory:
    """Fold one model's events (in log order) into its timeline. Events of other
    models and of unknown jobs or instances are ignored."""
    jobs: dict[str, DownloadRecord] = {}
    loads: dict[str, LoadRecord] = {}
    stop_reasons: dict[str, str] = {}
    cache: list[PromptCacheRecord] = []
    for rec in records:
        if rec.model != model:
            continue
        e = rec.event
        if (cached := _prompt_cache(rec)) is not None:
            cache.append(cached)
        elif isinstance(e, ev.DownloadRequested):
            jobs[e.job_id] = DownloadRecord(e.job_id, rec.recorded_at, e.revision, e.quant, e.total_bytes)
        elif isinstance(e, ev.InstanceRequested):
            loads[e.instance_id] = LoadRecord(e.instance_id, rec.recorded_at, e.reason, node=e.node)
        elif isinstance(e, ev.InstanceStopRequested):
            stop_reasons[e.instance_id] = e.reason
        elif (job_id := getattr(e, "job_id", None)) in jobs:
            jobs[job_id] = _download(jobs[job_id], rec)
        elif (instance_id := getattr(e, "instance_id", None)) in loads:
            loads[instance_id] = _load(loads[instance_id], rec, stop_reasons.get(instance_id))
    timeline = tuple(_running_uptime(load, now) for load in loads.values())
    return ModelHistory(
        model=model,
        downloads=tuple(jobs.values()),
        loads=timeline,
        restarts=sum(load.reason == "restart" for load in timeline),
        crashes=sum(load.ended == "crashed" for load in timeline),
        requests_served=sum(load.requests_served for load in timeline),
        prompt_cache=tuple(cache),
    )


__all__ = ["HISTORY_TYPES", "DownloadRecord", "LoadRecord", "ModelHistory", "PromptCacheRecord", "model_history"]
