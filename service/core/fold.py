"""The fold: ``fold(state, recorded) -> state``, one pure handler per event type.

The service's live state, the snapshots and ``modelrouter verify`` all go
through this one function. Handlers never raise on surprising input (a late
event from a replaced worker, a job the log never saw requested): they ignore
it, so that a log written by a crashing system still folds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from enum import Enum
from typing import Any

from service.core import events as ev
from service.core.download_lifecycle import DOWNLOAD_LIFECYCLE
from service.core.exit_reasons import explain_exit
from service.core.instance_lifecycle import INSTANCE_LIFECYCLE
from service.core.state import (
    DownloadJob,
    EngineStats,
    Failure,
    FailureKind,
    Instance,
    InstanceStatus,
    JobStatus,
    ModelConfig,
    ModelState,
    RouterState,
    evolve,
)

Handler = Callable[[RouterState, ev.Recorded], RouterState]
_INSTANCE_KINDS = INSTANCE_LIFECYCLE.event_types()
_DOWNLOAD_KINDS = DOWNLOAD_LIFECYCLE.event_types()
_HANDLERS: dict[type[ev.Event], Handler] = {}


def _on(cls: type[ev.Event]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _HANDLERS[cls] = fn
        return fn

    return register


def fold(state: RouterState, recorded: ev.Recorded) -> RouterState:
    """Apply one recorded event. Events at or below ``state.position`` are skipped,
    which makes re-delivery (tail overlap, snapshot + tail) harmless. A lifecycle
    event whose transition the tables in :mod:`service.core.transitions` do not
    allow is not applied: it is counted in ``state.anomalies``."""
    if recorded.position <= state.position:
        return state
    verdict = _check_transition(state, recorded)
    if verdict is None:
        handler = _HANDLERS.get(type(recorded.event))
        new = handler(state, recorded) if handler is not None else state
    elif verdict == _LATE:
        new = state
    else:
        new = evolve(state, anomalies=state.anomalies + 1, last_anomaly=f"#{recorded.position}: {verdict}")
    return evolve(new, position=recorded.position)


_LATE = "late"


def _check_transition(state: RouterState, rec: ev.Recorded) -> str | None:
    """None when the event may be applied, ``_LATE`` for a harmless late event,
    else why it is an impossible transition."""
    kind = rec.event.TYPE
    status: Enum | None
    if kind in _INSTANCE_KINDS:
        lifecycle, subject, status = INSTANCE_LIFECYCLE, "instance", _instance_status(state, rec)
    elif kind in _DOWNLOAD_KINDS:
        lifecycle, subject, status = DOWNLOAD_LIFECYCLE, "job", _job_status(state, rec)
    else:
        return None
    allowed, _ = lifecycle.next_status(status, kind)
    if allowed:
        return None
    if lifecycle.is_late(status, kind):
        return _LATE
    ident = getattr(rec.event, "instance_id", None) or getattr(rec.event, "job_id", None)
    shown = status.value if status is not None else "none"
    return f"{kind} for {subject} {ident} of {rec.model!r} in state {shown}"


def _instance_status(state: RouterState, rec: ev.Recorded) -> InstanceStatus | None:
    model = _model(state, rec)
    inst = model.instance if model is not None else None
    if inst is None:
        return None
    if isinstance(rec.event, ev.InstanceRequested):
        return inst.status  # any live instance: a second one would be a phantom
    return inst.status if inst.instance_id == getattr(rec.event, "instance_id", None) else None


def _job_status(state: RouterState, rec: ev.Recorded) -> JobStatus | None:
    found = _job_of(state, rec, str(getattr(rec.event, "job_id", "")))
    return found[1].status if found is not None else None


def replay(events: Iterable[ev.Recorded], state: RouterState | None = None) -> RouterState:
    """Fold a sequence of events onto ``state`` (or the empty state)."""
    current = state if state is not None else RouterState()
    for recorded in events:
        current = fold(current, recorded)
    return current


# --- helpers -----------------------------------------------------------------


def _model(state: RouterState, rec: ev.Recorded) -> ModelState | None:
    return state.models.get(rec.model) if rec.model is not None else None


def _ensure_model(state: RouterState, rec: ev.Recorded, source: str = "cache") -> ModelState | None:
    # Model events without a model key are malformed; the fold ignores them.
    if rec.model is None:
        return None
    return state.models.get(rec.model) or ModelState(name=rec.model, source=source, created_at=rec.recorded_at)


def _put(state: RouterState, model: ModelState) -> RouterState:
    return evolve(state, models={**state.models, model.name: model})


def _put_job(state: RouterState, model: ModelState, job: DownloadJob, **model_changes: Any) -> RouterState:
    updated = model.replace(jobs={**model.jobs, job.job_id: job}, **model_changes)
    return _put(state, updated)


def _job_of(state: RouterState, rec: ev.Recorded, job_id: str) -> tuple[ModelState, DownloadJob] | None:
    model = _model(state, rec)
    if model is None or job_id not in model.jobs:
        return None
    return model, model.jobs[job_id]


def _instance_of(state: RouterState, rec: ev.Recorded, instance_id: str) -> ModelState | None:
    # Events from an instance other than the current one are stale: ignore them.
    model = _model(state, rec)
    if model is None or model.instance is None or model.instance.instance_id != instance_id:
        return None
    return model


def _error(kind: FailureKind, reason: str, message: str, at: datetime, **extra: Any) -> Failure:
    return Failure(kind=kind, reason=reason, message=message, at=at, **extra)


def _primary_path(files: Iterable[ev.FileRef]) -> str | None:
    # The first non-mmproj GGUF (for split models, part 1 sorts first).
    paths = sorted(f.local_path for f in files if f.path.endswith(".gguf") and "mmproj" not in f.path.lower())
    return paths[0] if paths else None


# --- router ------------------------------------------------------------------


@_on(ev.RouterStarted)
def _router_started(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.RouterStarted)
    return evolve(state, router_pid=e.pid, router_started_at=rec.recorded_at)


@_on(ev.PartialFileFound)
def _partial_found(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.PartialFileFound)
    return evolve(state, partial_files={**state.partial_files, e.path: e.bytes})


@_on(ev.PartialFileRemoved)
def _partial_removed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.PartialFileRemoved)
    remaining = {path: size for path, size in state.partial_files.items() if path != e.path}
    return evolve(state, partial_files=remaining)


# --- catalogue ---------------------------------------------------------------


@_on(ev.ModelDiscovered)
def _discovered(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.ModelDiscovered)
    model = _ensure_model(state, rec, source=e.source)
    if model is None:
        return state
    return _put(state, model.replace(source=e.source, available=True, files=e.files, path=e.path, size=e.size))


@_on(ev.ModelConfigured)
def _configured(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.ModelConfigured)
    config = ModelConfig(
        aliases=tuple(e.aliases),
        params=dict(e.params),
        ttl_seconds=e.ttl_seconds,
        restart=e.restart,
        load_on_startup=e.load_on_startup,
        args=dict(e.args),
        ignored=tuple(e.ignored),
        hf_repo=e.hf_repo,
        hf_file=e.hf_file,
        stop_timeout=e.stop_timeout,
        hidden=e.hidden,
    )
    model = _ensure_model(state, rec)
    return state if model is None else _put(state, model.replace(config=config))


@_on(ev.ModelRemoved)
def _removed(state: RouterState, rec: ev.Recorded) -> RouterState:
    model = _model(state, rec)
    if model is None:
        return state
    if model.instance is not None:
        # Removal stops the instance first; dropping a live one here would leave
        # its worker untracked (the phantom instances of issue 11 §1.2).
        return evolve(
            state,
            anomalies=state.anomalies + 1,
            last_anomaly=f"#{rec.position}: model_removed for {model.name!r} with a live instance",
        )
    return _put(state, model.replace(available=False, files=(), path=None, size=0, failed=False))


# --- downloads ---------------------------------------------------------------


@_on(ev.DownloadRequested)
def _download_requested(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadRequested)
    model = _ensure_model(state, rec)
    if model is None:
        return state
    job = DownloadJob(
        job_id=e.job_id,
        model=model.name,
        repo=e.repo,
        revision=e.revision,
        commit=e.commit,
        quant=e.quant,
        files=e.files,
        bytes_total=e.total_bytes,
        requested_at=rec.recorded_at,
    )
    state = evolve(state, job_index={**state.job_index, e.job_id: model.name})
    return _put_job(state, model, job, active_job=e.job_id, last_job=e.job_id, failed=False)


@_on(ev.DownloadStarted)
def _download_started(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadStarted)
    found = _job_of(state, rec, e.job_id)
    if found is None:
        return state
    model, job = found
    job = evolve(
        job,
        status=JobStatus.CANCELLING if job.status is JobStatus.CANCELLING else JobStatus.RUNNING,
        pid=e.pid,
        pid_started_at=e.pid_started_at,
        commit=e.commit or job.commit,
        files=e.files or job.files,
        bytes_total=e.total_bytes or job.bytes_total,
        bytes_done=max(job.bytes_done, e.resumed_bytes),
        started_at=job.started_at or rec.recorded_at,
        error=None,
    )
    return _put_job(state, model, job, active_job=e.job_id)


@_on(ev.DownloadProgress)
def _download_progress(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadProgress)
    found = _job_of(state, rec, e.job_id)
    if found is None or not found[1].status.active:
        return state
    model, job = found
    job = evolve(
        job,
        bytes_done=e.bytes_done,
        bytes_total=e.bytes_total or job.bytes_total,
        bytes_per_second=e.bytes_per_second,
        eta_seconds=e.eta_seconds,
    )
    return _put_job(state, model, job)


def _end_job(
    state: RouterState, rec: ev.Recorded, job_id: str, status: JobStatus, **job_changes: Any
) -> tuple[RouterState, ModelState | None]:
    found = _job_of(state, rec, job_id)
    if found is None:
        return state, None
    model, job = found
    job = evolve(
        job, status=status, finished_at=rec.recorded_at, bytes_per_second=None, eta_seconds=None, **job_changes
    )
    active = None if model.active_job == job_id else model.active_job
    new_state = _put_job(state, model, job, active_job=active)
    return new_state, new_state.models[model.name]


@_on(ev.DownloadFinished)
def _download_finished(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadFinished)
    state, model = _end_job(state, rec, e.job_id, JobStatus.FINISHED, bytes_done=e.bytes_total, error=None)
    if model is None:
        return state
    size = sum(f.size for f in e.files)
    model = model.replace(
        available=True, files=e.files, path=_primary_path(e.files), size=size, failed=False, last_error=None
    )
    return _put(state, model)


@_on(ev.DownloadFailed)
def _download_failed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadFailed)
    error = _error(FailureKind.DOWNLOAD, e.reason, e.message, rec.recorded_at, retryable=e.retryable, job_id=e.job_id)
    state, model = _end_job(state, rec, e.job_id, JobStatus.FAILED, error=error)
    if model is None:
        return state
    # A failed re-download of a model we already have leaves it usable.
    return _put(state, model.replace(failed=not model.available, last_error=error))


@_on(ev.DownloadCancelRequested)
def _cancel_requested(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadCancelRequested)
    found = _job_of(state, rec, e.job_id)
    if found is None or not found[1].status.active:
        return state
    model, job = found
    return _put_job(state, model, evolve(job, status=JobStatus.CANCELLING, discard_requested=e.discard))


@_on(ev.DownloadCancelled)
def _download_cancelled(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadCancelled)
    state, _ = _end_job(state, rec, e.job_id, JobStatus.CANCELLED, bytes_done=e.bytes_on_disk)
    return state


@_on(ev.DownloadInterrupted)
def _download_interrupted(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadInterrupted)
    state, _ = _end_job(state, rec, e.job_id, JobStatus.INTERRUPTED, bytes_done=e.bytes_on_disk, pid=None)
    return state


@_on(ev.DownloadResumed)
def _download_resumed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadResumed)
    found = _job_of(state, rec, e.job_id)
    if found is None or found[1].status.active or found[0].active_job is not None:
        return state
    model, job = found
    job = evolve(job, status=JobStatus.QUEUED, finished_at=None, pid=None, bytes_done=e.bytes_on_disk, error=None)
    return _put_job(state, model, job, active_job=e.job_id, failed=False)


# --- instances ---------------------------------------------------------------


@_on(ev.InstanceRequested)
def _instance_requested(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceRequested)
    model = _model(state, rec)
    if model is None:
        return state
    instance = Instance(
        instance_id=e.instance_id, reason=e.reason, port=e.port, params=dict(e.params), requested_at=rec.recorded_at
    )
    return _put(state, model.replace(instance=instance, failed=False))


def _update_instance(state: RouterState, rec: ev.Recorded, instance_id: str, **changes: Any) -> RouterState:
    model = _instance_of(state, rec, instance_id)
    if model is None or model.instance is None:
        return state
    return _put(state, model.replace(instance=evolve(model.instance, **changes)))


@_on(ev.InstanceLoading)
def _instance_loading(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceLoading)
    model = _instance_of(state, rec, e.instance_id)
    if model is None or model.instance is None or model.instance.status is not InstanceStatus.STARTING:
        return state
    return _update_instance(
        state,
        rec,
        e.instance_id,
        status=InstanceStatus.LOADING,
        progress_at=rec.recorded_at,
        pid=e.pid,
        pid_started_at=e.pid_started_at,
        endpoint=e.endpoint,
        params={**model.instance.params, **e.params},
    )


@_on(ev.LoadingProgress)
def _loading_progress(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.LoadingProgress)
    return _update_instance(state, rec, e.instance_id, progress=e.progress, progress_at=rec.recorded_at)


@_on(ev.InstanceReady)
def _instance_ready(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceReady)
    model = _instance_of(state, rec, e.instance_id)
    if model is None or model.instance is None or model.instance.status is InstanceStatus.STOPPING:
        return state
    state = _update_instance(
        state,
        rec,
        e.instance_id,
        status=InstanceStatus.READY,
        pid=e.pid,
        endpoint=e.endpoint,
        progress=1.0,
        load_ms=e.load_ms,
        n_ctx=e.n_ctx,
        n_params=e.n_params,
        architecture=e.architecture,
        ready_at=rec.recorded_at,
    )
    ready = state.models[model.name]
    return _put(state, ready.replace(last_used=rec.recorded_at, last_error=None, crash_count=0))


@_on(ev.InstanceStats)
def _instance_stats(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceStats)
    stats = EngineStats(
        slots_total=e.slots_total,
        slots_busy=e.slots_busy,
        queue_depth=e.queue_depth,
        prefill_tokens_per_s=e.prefill_tokens_per_s,
        decode_tokens_per_s=e.decode_tokens_per_s,
        requests_finished=e.requests_finished,
        at=rec.recorded_at,
    )
    return _update_instance(state, rec, e.instance_id, stats=stats)


def _end_instance(
    state: RouterState, rec: ev.Recorded, instance_id: str, *, failed: bool, error: Failure | None
) -> RouterState:
    model = _instance_of(state, rec, instance_id)
    if model is None:
        return state
    changes: dict[str, Any] = {"instance": None, "failed": failed}
    if error is not None:
        changes["last_error"] = error
    return _put(state, model.replace(**changes))


@_on(ev.InstanceLoadFailed)
def _load_failed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceLoadFailed)
    error = _error(FailureKind.LOAD, e.reason, e.message, rec.recorded_at)
    return _end_instance(state, rec, e.instance_id, failed=True, error=error)


@_on(ev.InstanceStopRequested)
def _stop_requested(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceStopRequested)
    return _update_instance(state, rec, e.instance_id, status=InstanceStatus.STOPPING, stop_reason=e.reason)


@_on(ev.InstanceStopped)
@_on(ev.InstanceLost)
def _instance_ended(state: RouterState, rec: ev.Recorded) -> RouterState:
    # Stopped as asked, or lost with a previous service: either way not a failure.
    e = rec.event
    assert isinstance(e, (ev.InstanceStopped, ev.InstanceLost))
    return _end_instance(state, rec, e.instance_id, failed=False, error=None)


@_on(ev.InstanceCrashed)
def _instance_crashed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.InstanceCrashed)
    model = _instance_of(state, rec, e.instance_id)
    if model is None or model.instance is None:
        return state
    inst = model.instance
    first = inst.status is InstanceStatus.READY and inst.requests_done == 0 and e.requests_in_flight > 0
    why = explain_exit(
        e.exit_code, e.signal, max_rss_bytes=e.max_rss_bytes, oom_killed=e.oom_killed, first_request=first
    )
    error = _error(
        FailureKind.CRASH, "crashed", why.message, rec.recorded_at,
        exit_code=e.exit_code, signal=e.signal, signal_name=why.reason if e.signal is not None else None,
        status_code=why.exit_code, hint=why.hint, first_request=first, max_rss_bytes=e.max_rss_bytes,
        stderr_tail=e.stderr_tail,
    )  # fmt: skip
    return _put(
        state,
        model.replace(
            instance=None,
            failed=True,
            last_error=error,
            crash_count=model.crash_count + 1,
            first_request_crashes=model.first_request_crashes + 1 if first else model.first_request_crashes,
        ),
    )


# Read by monitors from the worker's HTTP thread: they say nothing about whether its engine survives a request.
_PROBE_ROUTES = frozenset({"/slots", "/metrics", "/props", "/health", "/v1/health", "/models", "/v1/models"})


@_on(ev.RequestCompleted)
def _request_completed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.RequestCompleted)
    model = _model(state, rec)
    if model is None:
        return state
    inst, crashes = model.instance, model.first_request_crashes
    if inst is not None and inst.instance_id == e.instance_id and e.route not in _PROBE_ROUTES:
        inst = evolve(inst, requests_done=inst.requests_done + 1)
        if e.status_code < 500:
            crashes = 0  # a live worker answered: it survived a first request, the crash loop is over
    return _put(state, model.replace(last_used=rec.recorded_at, instance=inst, first_request_crashes=crashes))
