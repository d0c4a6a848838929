"""Decisions: given the fold (and the time, and ids), which events to append.

Pure functions. The supervisors call them under their lock, append what they
return, and only then act on processes. Refusals raise ``CommandRejected``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from service.core import events as ev
from service.core.errors import CommandRejected
from service.core.state import InstanceStatus, ModelState, ModelStatus, RouterState

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class DownloadDecision:
    """Either join ``existing_job`` or append ``events`` (which start ``job_id``)."""

    job_id: str | None
    existing_job: str | None
    already_downloaded: bool
    events: tuple[ev.Event, ...] = ()


def request_download(state: RouterState, model: str, job_id: str, resolution: Mapping[str, Any]) -> DownloadDecision:
    """One download per model: a running job is joined; a model whose files for
    this commit are present is not fetched again."""
    current = state.models.get(model)
    if current is not None and current.active_job is not None:
        return DownloadDecision(job_id=None, existing_job=current.active_job, already_downloaded=False)
    if current is not None and current.available and _same_commit(current, str(resolution.get("commit", ""))):
        return DownloadDecision(job_id=None, existing_job=None, already_downloaded=True)
    requested = ev.DownloadRequested(
        job_id=job_id,
        repo=str(resolution["repo"]),
        revision=str(resolution.get("revision") or "main"),
        commit=str(resolution.get("commit", "")),
        quant=resolution.get("quant"),
        files=tuple(dict(f) for f in resolution.get("files", ())),
        total_bytes=int(resolution.get("total_bytes", 0)),
    )
    return DownloadDecision(job_id=job_id, existing_job=None, already_downloaded=False, events=(requested,))


def _same_commit(model: ModelState, commit: str) -> bool:
    if model.source != "cache" or not model.last_job:
        return model.source != "cache"  # local files: nothing to re-fetch
    job = model.jobs.get(model.last_job)
    return job is not None and (not commit or job.commit == commit)


def cancel_download(state: RouterState, job_id: str, *, discard: bool) -> tuple[ev.Event, ...]:
    """Refuse unknown or finished jobs; otherwise record the cancel request."""
    job = state.job(job_id)
    if job is None:
        raise CommandRejected("job_not_found", f"download job {job_id!r} does not exist")
    if not job.status.active:
        raise CommandRejected(
            "conflict", f"download job {job_id!r} is already {job.status.value}", job_status=job.status.value
        )
    return (ev.DownloadCancelRequested(job_id=job_id, discard=discard),)


def require_loadable(state: RouterState, name: str) -> ModelState:
    """The model behind ``name`` (or alias), refusing what cannot be loaded."""
    model = state.resolve(name)
    if model is None or not model.listed:
        raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
    if model.status is ModelStatus.DOWNLOADING:
        raise CommandRejected("conflict", f"model {model.name!r} is still downloading", model=model.name)
    if not model.available or not model.path:
        raise CommandRejected("model_not_found", f"model {model.name!r} has no files to load", model=model.name)
    return model


def running_count(state: RouterState) -> int:
    """Instances that hold a slot: starting, loading, ready or stopping."""
    return sum(1 for m in state.models.values() if m.instance is not None)


def choose_victim(state: RouterState, busy: Mapping[str, int], exclude: str | None = None) -> ModelState | None:
    """The least recently used *idle ready* model, or None. Loading, stopping and
    busy models (requests in flight) are never evicted."""
    idle = [
        m
        for m in state.models.values()
        if m.instance is not None
        and m.instance.status is InstanceStatus.READY
        and busy.get(m.name, 0) == 0
        and m.name != exclude
    ]
    if not idle:
        return None
    return min(idle, key=lambda m: (m.last_used or _EPOCH, m.name))


def idle_expired(state: RouterState, busy: Mapping[str, int], now: datetime) -> list[ModelState]:
    """Ready, idle models whose ``ttl_seconds`` has passed since last use."""
    expired = []
    for m in state.models.values():
        ttl = m.config.ttl_seconds
        if ttl is None or ttl <= 0 or m.instance is None or m.instance.status is not InstanceStatus.READY:
            continue
        last = m.last_used or m.instance.ready_at
        if busy.get(m.name, 0) == 0 and last is not None and (now - last).total_seconds() >= ttl:
            expired.append(m)
    return expired
