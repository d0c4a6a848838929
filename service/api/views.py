"""Pure rendering of the fold into wire shapes (llama.cpp router shapes where they exist)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from service.core.state import DownloadJob, ModelState, ModelStatus, RouterState
from service.event_store.codec import format_time


def _time(moment: datetime | None) -> str | None:
    return format_time(moment) if moment is not None else None


def job_view(job: DownloadJob) -> dict[str, Any]:
    """``GET /downloads/{job_id}``."""
    return {
        "job_id": job.job_id,
        "model": job.model,
        "status": job.status.value,
        "repo": job.repo,
        "revision": job.revision,
        "commit": job.commit,
        "files": [dict(f) for f in job.files],
        "bytes_done": job.bytes_done,
        "bytes_total": job.bytes_total,
        "bytes_per_second": job.bytes_per_second,
        "eta_seconds": job.eta_seconds,
        "pid": job.pid,
        "requested_at": _time(job.requested_at),
        "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
        "error": dict(job.error) if job.error else None,
    }


def _status(model: ModelState, state: RouterState) -> dict[str, Any]:
    status: dict[str, Any] = {"value": model.status.value}
    if model.status is ModelStatus.DOWNLOADING and model.active_job:
        job = state.job(model.active_job)
        if job is not None:
            fraction = job.bytes_done / job.bytes_total if job.bytes_total else 0.0
            status["progress"] = {
                "job_id": job.job_id,
                "job_status": job.status.value,
                "bytes_done": job.bytes_done,
                "bytes_total": job.bytes_total,
                "fraction": round(fraction, 4),
                "bytes_per_second": job.bytes_per_second,
                "eta_seconds": job.eta_seconds,
            }
    if model.instance is not None:
        inst = model.instance
        status["instance"] = {
            "instance_id": inst.instance_id,
            "state": inst.status.value,
            "pid": inst.pid,
            "endpoint": inst.endpoint or None,
            "progress": inst.progress,
            "load_ms": inst.load_ms,
            "n_ctx": inst.n_ctx,
            "args": dict(inst.params),
        }
    if model.failed:
        status["failed"] = True
        if model.last_error is not None:
            status["error"] = dict(model.last_error)
            if model.last_error.get("exit_code") is not None:
                status["exit_code"] = model.last_error["exit_code"]
    return status


def model_view(model: ModelState, state: RouterState) -> dict[str, Any]:
    """One entry of ``GET /models``: llama.cpp's shape plus progress and errors."""
    created = int(model.created_at.timestamp()) if model.created_at else 0
    return {
        "id": model.name,
        "aliases": list(model.config.aliases),
        "tags": [],
        "object": "model",
        "owned_by": "modelrouter",
        "created": created,
        "status": _status(model, state),
        "source": model.source,
        "can_remove": model.source == "cache" and model.available,
        "path": model.path,
        "size": model.size,
        "last_used": _time(model.last_used),
        "last_error": dict(model.last_error) if model.last_error else None,
    }


def models_view(state: RouterState) -> dict[str, Any]:
    """``GET /models`` and ``GET /v1/models``."""
    data = [model_view(m, state) for name, m in sorted(state.models.items()) if m.listed and not m.config.hidden]
    return {"object": "list", "data": data}
