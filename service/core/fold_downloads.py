"""The fold's handlers of download-job events (see :mod:`service.core.fold`)."""

from __future__ import annotations

from typing import Any

import service.core.events as ev
from service.core.fold_support import (
    ensure_model,
    failure,
    job_of,
    on,
    primary_path,
    put_job,
    put_model,
)
from service.core.state import (
    DownloadJob,
    FailureKind,
    JobStatus,
    ModelState,
    RouterState,
    evolve,
)

# --- downloads ---------------------------------------------------------------


@on(ev.DownloadRequested)
def _download_requested(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadRequested)
    model = ensure_model(state, rec)
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
    return put_job(state, model, job, active_job=e.job_id, last_job=e.job_id, failed=False)


@on(ev.DownloadStarted)
def _download_started(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadStarted)
    found = job_of(state, rec, e.job_id)
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
    return put_job(state, model, job, active_job=e.job_id)


@on(ev.DownloadProgress)
def _download_progress(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadProgress)
    found = job_of(state, rec, e.job_id)
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
    return put_job(state, model, job)


def _end_job(
    state: RouterState,
    rec: ev.Recorded,
    job_id: str,
    status: JobStatus,
    **job_changes: Any,  # Any: job fields
) -> tuple[RouterState, ModelState | None]:
    found = job_of(state, rec, job_id)
    if found is None:
        return state, None
    model, job = found
    job = evolve(
        job, status=status, finished_at=rec.recorded_at, bytes_per_second=None, eta_seconds=None, **job_changes
    )
    active = None if model.active_job == job_id else model.active_job
    new_state = put_job(state, model, job, active_job=active)
    return new_state, new_state.models[model.name]


@on(ev.DownloadFinished)
def _download_finished(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadFinished)
    state, model = _end_job(state, rec, e.job_id, JobStatus.FINISHED, bytes_done=e.bytes_total, error=None)
    if model is None:
        return state
    size = sum(f.size for f in e.files)
    model = model.replace(
        available=True, files=e.files, path=primary_path(e.files), size=size, failed=False, last_error=None
    )
    return put_model(state, model)


@on(ev.DownloadFailed)
def _download_failed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadFailed)
    error = failure(FailureKind.DOWNLOAD, e.reason, e.message, rec.recorded_at, retryable=e.retryable, job_id=e.job_id)
    state, model = _end_job(state, rec, e.job_id, JobStatus.FAILED, error=error)
    if model is None:
        return state
    # A failed re-download of a model we already have leaves it usable.
    return put_model(state, model.replace(failed=not model.available, last_error=error))


@on(ev.DownloadCancelRequested)
def _cancel_requested(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadCancelRequested)
    found = job_of(state, rec, e.job_id)
    if found is None or not found[1].status.active:
        return state
    model, job = found
    return put_job(state, model, evolve(job, status=JobStatus.CANCELLING, discard_requested=e.discard))


@on(ev.DownloadCancelled)
def _download_cancelled(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadCancelled)
    state, _ = _end_job(state, rec, e.job_id, JobStatus.CANCELLED, bytes_done=e.bytes_on_disk)
    return state


@on(ev.DownloadInterrupted)
def _download_interrupted(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadInterrupted)
    state, _ = _end_job(state, rec, e.job_id, JobStatus.INTERRUPTED, bytes_done=e.bytes_on_disk, pid=None)
    return state


@on(ev.DownloadResumed)
def _download_resumed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.DownloadResumed)
    found = job_of(state, rec, e.job_id)
    if found is None or found[1].status.active or found[0].active_job is not None:
        return state
    model, job = found
    job = evolve(job, status=JobStatus.QUEUED, finished_at=None, pid=None, bytes_done=e.bytes_on_disk, error=None)
    return put_job(state, model, job, active_job=e.job_id, failed=False)
