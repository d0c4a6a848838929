"""Reloading the model sources: ``POST /models/reload`` and llama.cpp's ``GET /models?reload=1``.

Both re-read the presets, the models dir and the caches (see
:class:`service.catalogue.sources.Catalogue`): removed models disappear (a
running one is stopped first, reason ``removed``), changed ones are stopped
so that their next load uses the new settings, new ones appear, and one
``models_reloaded`` event says which. ``?reload=1`` on ``GET /models`` and
``GET /v1/models`` runs as a hook before the listing, so the listing already
shows the result, as in llama.cpp.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, post
from litestar.status_codes import HTTP_200_OK

from service.api.deps import provide_catalogue
from service.api.problems import Problem
from service.api.schemas import ReloadAnswer, problems
from service.catalogue.sources import Catalogue
from service.llamacpp.presets import PresetError

_LISTINGS = frozenset({"/models", "/v1/models"})
_TRUE = frozenset({"1", "true", "yes", "on"})


async def _reload(catalogue: Catalogue | None) -> ReloadAnswer:
    if catalogue is None:
        raise Problem(503, "state_unavailable", "the model sources are not read yet: the service is starting")
    try:
        plan = await catalogue.refresh(reload=True)
    except PresetError as exc:
        # Nothing changed: the last good reading stays in force.
        raise Problem(400, "invalid_preset", str(exc)) from None
    return ReloadAnswer(
        success=True,
        added=list(plan.added),
        changed=list(plan.changed),
        removed=list(plan.removed),
        unloaded=list(plan.unload),
    )


@post(
    "/models/reload",
    operation_id="reloadModels",
    tags=["models"],
    status_code=HTTP_200_OK,
    responses=problems(400, 503, 507),
)
async def reload_models(catalogue: Catalogue | None) -> ReloadAnswer:
    """Re-read presets, models dir and caches; answers what changed
    (``added``, ``changed``, ``removed``, ``unloaded``)."""
    return await _reload(catalogue)


async def reload_before_listing(request: Request[Any, Any, Any]) -> None:
    """``before_request`` hook: ``GET /models?reload=1`` reloads, then lists. A hook gets no
    dependencies injected, so it asks the provider itself."""
    if request.method != "GET" or request.url.path not in _LISTINGS:
        return
    if request.query_params.get("reload", "").strip().lower() in _TRUE:
        await _reload(provide_catalogue(request.app.state))
