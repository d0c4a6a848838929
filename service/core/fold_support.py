"""What the fold's handlers share: the registry of handlers by event class, and the small
steps every handler takes (find the model, its job or instance, put a changed model back).

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import service.core.events as ev
from service.core.state import (
    DownloadJob,
    Failure,
    FailureKind,
    ModelState,
    RouterState,
    evolve,
)

Handler = Callable[[RouterState, ev.Recorded], RouterState]
HANDLERS: dict[type[ev.Event], Handler] = {}


def on(cls: type[ev.Event]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[cls] = fn
        return fn

    return register


# --- helpers -----------------------------------------------------------------


def model_of(state: RouterState, rec: ev.Recorded) -> ModelState | None:
    return state.models.get(rec.model) if rec.model is not None else None


def ensure_model(state: RouterState, rec: ev.Recorded, source: str = "cache") -> ModelState | None:
    # Model events without a model key are malformed; the fold ignores them.
    if rec.model is None:
        return None
    return state.models.get(rec.model) or ModelState(name=rec.model, source=source, created_at=rec.recorded_at)


def put_model(state: RouterState, model: ModelState) -> RouterState:
    return evolve(state, models={**state.models, model.name: model})


# Any: model fields of several types, checked by evolve against the dataclass.
def put_job(state: RouterState, model: ModelState, job: DownloadJob, **model_changes: Any) -> RouterState:
    updated = model.replace(jobs={**model.jobs, job.job_id: job}, **model_changes)
    return put_model(state, updated)


def job_of(state: RouterState, rec: ev.Recorded, job_id: str) -> tuple[ModelState, DownloadJob] | None:
    model = model_of(state, rec)
    if model is None or job_id not in model.jobs:
        return None
    return model, model.jobs[job_id]


def instance_of(state: RouterState, rec: ev.Recorded, instance_id: str) -> ModelState | None:
    # Events from an instance other than the current one are stale: ignore them.
    model = model_of(state, rec)
    if model is None or model.instance is None or model.instance.instance_id != instance_id:
        return None
    return model


# Any: the optional Failure fields of its kind (ints, strs, bools), checked by the dataclass.
def failure(kind: FailureKind, reason: str, message: str, at: datetime, **extra: Any) -> Failure:
    return Failure(kind=kind, reason=reason, message=message, at=at, **extra)


def primary_path(files: Iterable[ev.FileRef]) -> str | None:
    # The first non-mmproj GGUF (for split models, part 1 sorts first).
    paths = sorted(f.local_path for f in files if f.path.endswith(".gguf") and "mmproj" not in f.path.lower())
    return paths[0] if paths else None
