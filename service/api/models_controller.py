"""Model catalogue and lifecycle endpoints in llama.cpp router shape."""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, post
from litestar.status_codes import HTTP_200_OK

from service.api.problems import Problem
from service.api.request_body import flag, json_body, model_field
from service.api.views import job_view, model_view, models_view
from service.core import events as ev
from service.core.errors import CommandRejected
from service.downloads.removal import remove_files
from service.event_store.codec import NewEvent
from service.runtime import Runtime


@get("/models", operation_id="listModels", tags=["models"])
async def list_models(runtime: Runtime) -> dict[str, Any]:
    """Every model the log knows of, with status, progress and last error."""
    return models_view(runtime.live.state)


@get("/v1/models", operation_id="listModelsOpenAI", tags=["models"])
async def list_models_openai(runtime: Runtime) -> dict[str, Any]:
    """The same list under the OpenAI path, for OpenAI clients."""
    return models_view(runtime.live.state)


@post("/models/load", operation_id="loadModel", tags=["models"], status_code=HTTP_200_OK)
async def load_model(request: Request[Any, Any, Any], runtime: Runtime) -> dict[str, Any]:
    """Start the model's worker and return at once; readiness arrives as events
    (``instance_ready``) and in ``GET /models``. Loading a running model is a no-op."""
    name = model_field(await json_body(request))
    model = await runtime.instances.load(name)
    return {"success": True, "model": model.name, "status": model.status.value}


@post("/models/unload", operation_id="unloadModel", tags=["models"], status_code=HTTP_200_OK)
async def unload_model(request: Request[Any, Any, Any], runtime: Runtime, discard: str | None = None) -> dict[str, Any]:
    """Stop the model's worker; for a model that is downloading, cancel the
    download instead (llama.cpp's behaviour), keeping the partial unless ``?discard=true``."""
    name = model_field(await json_body(request))
    model = runtime.live.state.resolve(name)
    if model is not None and model.active_job is not None:
        job = await runtime.downloads.cancel(model.active_job, discard=flag(discard, "discard"))
        return {"success": True, "model": model.name, "download": job_view(job)}
    await runtime.instances.unload(name)
    state = runtime.live.state
    resolved = state.resolve(name)
    return {
        "success": True,
        "model": resolved.name if resolved else name,
        "status": resolved.status.value if resolved else None,
    }


@delete("/models", operation_id="removeModel", tags=["models"], status_code=HTTP_200_OK)
async def remove_model(runtime: Runtime, model: str, force: str | None = None) -> dict[str, Any]:
    """Delete a downloaded model's files (blobs no other snapshot uses too) and
    record ``model_removed``. A loaded model is refused unless ``?force=true``."""
    state = runtime.live.state
    found = state.resolve(model)
    if found is None or not found.listed:
        raise Problem(404, "model_not_found", f"model {model!r} is not found", model=model)
    if found.source != "cache":
        raise Problem(
            409,
            "conflict",
            f"model {found.name!r} comes from {found.source}, not the download cache; remove its file yourself",
        )
    if found.active_job is not None:
        await runtime.downloads.cancel(found.active_job, discard=True)
    if found.instance is not None:
        if not flag(force, "force"):
            raise CommandRejected(
                "model_loaded", f"model {found.name!r} is loaded; unload it first or pass force=true", model=found.name
            )
        await runtime.instances.unload(found.name, reason="remove")
    found = runtime.live.state.models[found.name]
    job = state.job(found.last_job) if found.last_job else None
    removal = (
        remove_files(
            runtime.settings.cache_dir,
            job.repo if job else found.name.split(":")[0],
            job.commit if job else "",
            found.files,
        )
        if found.files
        else None
    )
    removed = ev.ModelRemoved(files=removal.files if removal else (), bytes_freed=removal.bytes_freed if removal else 0)
    _, new_state = await runtime.live.record([NewEvent(removed, model=found.name)])
    return {
        "success": True,
        "model": found.name,
        "files": list(removed.files),
        "bytes_freed": removed.bytes_freed,
        "entry": model_view(new_state.models[found.name], new_state),
    }
