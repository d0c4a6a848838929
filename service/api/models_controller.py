"""Model catalogue and lifecycle endpoints in llama.cpp router shape."""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, post
from litestar.status_codes import HTTP_200_OK

from service.api.request_body import flag, json_body, model_field
from service.api.views import job_view, model_view, models_view
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
    """Delete a downloaded model's files (blobs no other model uses too) and record
    ``model_removed``. A running download is cancelled first; a loaded model is
    refused unless ``?force=true``, which stops it first."""
    removed = await runtime.remover.remove(model, force=flag(force, "force"))
    return {
        "success": True,
        "model": removed.model,
        "files": list(removed.files),
        "bytes_freed": removed.bytes_freed,
        "kept_blobs": list(removed.kept_blobs),
        "entry": model_view(removed.state.models[removed.model], removed.state),
    }
