"""Removing a downloaded model: what must stop first, and which files go.

The decision is taken over the fold: every finished download recorded the
files it published (``snapshot_path`` links and ``blob_path`` blobs with their
sha256). The model's links go; a blob goes only when no other model the log
knows still uses it (another quant or revision of the same repo may share
it). The effect (``service/downloads/file_deletion.py``) re-checks the links on
disk before it deletes a blob, for files the log never saw.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.errors import CommandRejected
from service.core.state import ModelState, RouterState


@dataclass(frozen=True, slots=True)
class RemovalPlan:
    """What removing ``model`` takes: a job to cancel and an instance to stop
    first, then the files to delete and the blobs kept because others use them."""

    model: str
    repo: str
    commit: str
    cancel_job: str | None
    stop_instance: str | None
    links: tuple[str, ...]
    blobs: tuple[str, ...]
    kept_blobs: tuple[str, ...]


def plan_removal(state: RouterState, name: str, *, force: bool) -> RemovalPlan:
    """Refuse what cannot be removed (unknown: 404; not from the download cache, or
    loaded without ``force``: 409); otherwise the plan."""
    model = state.resolve(name)
    if model is None or not model.listed:
        raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
    if model.source != "cache":
        raise CommandRejected(
            "conflict",
            f"model {model.name!r} comes from {model.source}, not the download cache; remove its file yourself",
            model=model.name,
        )
    if model.instance is not None and not force:
        raise CommandRejected(
            "model_loaded", f"model {model.name!r} is loaded; unload it first or pass force=true", model=model.name
        )
    job = state.job(model.last_job) if model.last_job else None
    used_elsewhere = _blobs_of_others(state, model)
    blobs = {f.blob_path: f.sha256 or "" for f in model.files if f.blob_path}
    return RemovalPlan(
        model=model.name,
        repo=job.repo if job else model.name.split(":")[0],
        commit=job.commit if job else "",
        cancel_job=model.active_job,
        stop_instance=model.instance.instance_id if model.instance is not None else None,
        links=tuple(f.snapshot_path for f in model.files if f.snapshot_path),
        blobs=tuple(sorted(path for path, sha in blobs.items() if sha not in used_elsewhere)),
        kept_blobs=tuple(sorted(path for path, sha in blobs.items() if sha in used_elsewhere)),
    )


def _blobs_of_others(state: RouterState, model: ModelState) -> set[str]:
    return {
        f.sha256 or ""
        for other in state.models.values()
        if other.name != model.name and other.available
        for f in other.files
    }
