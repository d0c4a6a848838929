"""Model catalogue and lifecycle endpoints in llama.cpp router shape."""

from __future__ import annotations

from typing import Annotated

from litestar import delete, get, post
from litestar.params import Parameter
from litestar.status_codes import HTTP_200_OK

from service.api.schemas import (
    LoadAnswer,
    ModelCommand,
    ModelList,
    ModelParam,
    RemoveAnswer,
    UnloadAnswer,
    problems,
)
from service.api.scopes import require_model, visible
from service.api.views import job_view, model_view, models_view
from service.core.instance_decisions import unload_target
from service.core.keys import Principal
from service.core.server_mode import ServerMode
from service.event_store.live_state import LiveState
from service.supervision.downloads import DownloadSupervisor
from service.supervision.instances import InstanceSupervisor
from service.supervision.model_removal import ModelRemover

_DISCARD = Parameter(description="Delete the partial file of a cancelled download (default: keep it to resume)")
_FORCE = Parameter(description="Stop a loaded model's worker first (default: refuse with 409)")


@get("/models", operation_id="listModels", tags=["models"], responses=problems(400))
async def list_models(live: LiveState, mode: ServerMode, caller: Principal) -> ModelList:
    """Every model the log knows of, with status, progress and last error (single-model mode: its model,
    and llama-server's ``models`` list); a loaded model has llama-server's ``meta``. A named key sees
    the models its scope allows."""
    return models_view(live.state, mode, lambda m: visible(caller, m))


@get("/v1/models", operation_id="listModelsOpenAI", tags=["models"], responses=problems(400))
async def list_models_openai(live: LiveState, mode: ServerMode, caller: Principal) -> ModelList:
    """The same list under the OpenAI path, for OpenAI clients."""
    return models_view(live.state, mode, lambda m: visible(caller, m))


@post(
    "/models/load",
    operation_id="loadModel",
    tags=["models"],
    status_code=HTTP_200_OK,
    responses=problems(400, 403, 404, 409, 413, 503, 507),
)
async def load_model(
    data: ModelCommand, instances: InstanceSupervisor, live: LiveState, caller: Principal
) -> LoadAnswer:
    """Start the model's worker and return at once; readiness arrives as events
    (``instance_ready``) and in ``GET /models``. Loading a running model is a no-op."""
    name = data.model.strip()
    require_model(caller, live.state, name, "/models/load")
    model = await instances.load(name)
    return LoadAnswer(success=True, model=model.name, status=model.status.value)


@post(
    "/models/unload",
    operation_id="unloadModel",
    tags=["models"],
    status_code=HTTP_200_OK,
    responses=problems(400, 403, 404, 409, 413, 503, 507),
)
async def unload_model(
    data: ModelCommand,
    live: LiveState,
    instances: InstanceSupervisor,
    downloads: DownloadSupervisor,
    caller: Principal,
    discard: Annotated[bool, _DISCARD] = False,
) -> UnloadAnswer:
    """Stop the model's worker; for a model that is downloading, cancel the
    download instead (llama.cpp's behaviour), keeping the partial unless ``?discard=true``."""
    name = data.model.strip()
    require_model(caller, live.state, name, "/models/unload")
    target = unload_target(live.state, name)  # the core decides: a download in progress is cancelled
    if target.cancel_job is not None:
        job = await downloads.cancel(target.cancel_job, discard=discard)
        return UnloadAnswer(success=True, model=target.model, download=job_view(job))
    await instances.unload(name)
    resolved = live.state.resolve(name)
    return UnloadAnswer(
        success=True,
        model=resolved.name if resolved else name,
        status=resolved.status.value if resolved else None,
    )


@delete(
    "/models",
    operation_id="removeModel",
    tags=["models"],
    status_code=HTTP_200_OK,
    responses=problems(400, 403, 404, 409, 503, 507),
)
async def remove_model(
    remover: ModelRemover,
    model: ModelParam,
    live: LiveState,
    caller: Principal,
    force: Annotated[bool, _FORCE] = False,
) -> RemoveAnswer:
    """Delete a downloaded model's files (blobs no other model uses too) and record
    ``model_removed``. A running download is cancelled first; a loaded model is
    refused unless ``?force=true``, which stops it first."""
    require_model(caller, live.state, model.strip(), "/models")
    removed = await remover.remove(model.strip(), force=force)
    return RemoveAnswer(
        success=True,
        model=removed.model,
        files=list(removed.files),
        bytes_freed=removed.bytes_freed,
        kept_blobs=list(removed.kept_blobs),
        entry=model_view(removed.state.models[removed.model], removed.state),
    )
