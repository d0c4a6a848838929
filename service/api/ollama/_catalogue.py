"""Ollama's model management routes: version, tags, ps, show, delete, copy, create, push."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import MediaType, Request, Response, delete, get, head, post
from litestar.params import Body, SkipValidation
from litestar.status_codes import HTTP_200_OK

import service.api.ollama._schemas as o
from service.api.ollama._errors import ollama_errors
from service.api.ollama._views import ps_view, show_view, tags_view
from service.api.problems import Problem
from service.api.scopes import require_model, scoped_state
from service.core.aliases import add_alias, alias_owner, remove_alias
from service.core.keys import Principal
from service.core.ollama import model_name
from service.core.state import ModelState, RouterState
from service.event_store.live_state import LiveState
from service.supervision.interpreter import Interpreter
from service.supervision.model_removal import ModelRemover
from service.supervision.surroundings import Clock

OLLAMA_VERSION = "0.33.0"
"""The Ollama release whose ``docs/api.md`` and ``api/types.go`` these routes follow; clients
that check for a minimum version see that they may use what it documents."""
_TAGS = ["ollama"]
_DONE = "Done: an empty body, as Ollama answers (its clients read the status only)"


def find_model(state: RouterState, name: str) -> ModelState:
    """The model an Ollama name means (``hf.co/`` and ``:latest`` dropped), or a 404 in its words."""
    wanted = model_name(name)
    found = state.resolve(wanted)
    if found is None or not found.listed:
        raise Problem(404, "model_not_found", f"model '{name}' not found", model=name)
    return found


@get("/version", operation_id="ollamaVersion", tags=_TAGS, responses=ollama_errors(401, 403))
async def version() -> o.Version:
    """Ollama's ``GET /api/version`` (health probes use it)."""
    return o.Version(version=OLLAMA_VERSION)


@head("/version", operation_id="ollamaVersionHead", tags=_TAGS, include_in_schema=False)
async def version_head() -> None:
    """``HEAD /api/version``, as Ollama answers it."""


@get("/tags", operation_id="ollamaTags", tags=_TAGS, responses=ollama_errors(401, 403))
async def tags(live: LiveState, caller: Principal) -> o.TagList:
    """The models on disk, with size, digest and details from each GGUF's header (those the key may use)."""
    return tags_view(scoped_state(caller, live.state))


@head("/tags", operation_id="ollamaTagsHead", tags=_TAGS, include_in_schema=False)
async def tags_head() -> None:
    """``HEAD /api/tags``, which Ollama answers too (clients probe with it)."""


@get("/ps", operation_id="ollamaPs", tags=_TAGS, responses=ollama_errors(401, 403))
async def ps(  # a Protocol: no isinstance
    live: LiveState, clock: SkipValidation[Clock], caller: Principal
) -> o.RunningList:
    """The models with a running worker, with their context length and when they would unload."""
    return ps_view(scoped_state(caller, live.state), clock.now())


@post(
    "/show", operation_id="ollamaShow", tags=_TAGS, status_code=HTTP_200_OK, responses=ollama_errors(400, 401, 403, 404)
)
async def show(data: o.ModelBody, live: LiveState, caller: Principal) -> o.Shown:
    """The model's details, chat template, options, header (``model_info``) and capabilities."""
    require_model(caller, live.state, model_name(data.named()), "/api/show")
    return show_view(find_model(live.state, data.named()))


@delete(
    "/delete",
    operation_id="ollamaDelete",
    tags=_TAGS,
    status_code=HTTP_200_OK,
    media_type=MediaType.TEXT,
    response_description=_DONE,
    responses=ollama_errors(400, 401, 403, 404, 409, 503),
)
async def delete_model(
    data: Annotated[o.ModelBody, Body()],
    live: LiveState,
    remover: ModelRemover,
    interpreter: Interpreter,
    caller: Principal,
) -> Response[bytes]:
    """Delete a name. A name ``/api/copy`` gave: that name only (``model_alias_removed``), as Ollama's
    delete of a copy; else the model's files (``DELETE /models``), stopping its worker first as
    Ollama does, and with them the names copies gave it. Answers 200 with an empty body, as Ollama."""
    name = model_name(data.named())
    require_model(caller, live.state, name, "/api/delete")
    if alias_owner(live.state, name) is not None:
        await interpreter.apply(lambda state: remove_alias(state, name))
    else:
        await remover.remove(find_model(live.state, data.named()).name, force=True)
    return _status_only()


@post(
    "/copy",
    operation_id="ollamaCopy",
    tags=_TAGS,
    status_code=HTTP_200_OK,
    media_type=MediaType.TEXT,
    response_description=_DONE,
    responses=ollama_errors(400, 401, 403, 404, 409),
)
async def copy(data: o.CopyBody, interpreter: Interpreter, live: LiveState, caller: Principal) -> Response[bytes]:
    """Ollama's copy: ``destination`` becomes another name of the ``source`` model (``model_aliased``),
    listed, loaded, shown and deleted by that name. Answers 200 with an empty body, as Ollama."""
    source, alias = model_name(data.source), model_name(data.destination)
    for name in (source, alias):  # a scoped key may neither copy another's model nor name one outside it
        require_model(caller, live.state, name, "/api/copy")
    await interpreter.apply(lambda state: add_alias(state, source, alias))
    return _status_only()


def _status_only() -> Response[bytes]:
    """Ollama's answer to a copy or a delete: 200 and nothing else (its clients read the status)."""
    return Response(b"", status_code=HTTP_200_OK, media_type=MediaType.TEXT)


def _hub_only(request: Request[Any, Any, Any]) -> Problem:
    what = request.url.path.rsplit("/", 1)[-1]
    return Problem(
        400,
        "not_supported",
        f"modelrouter does not {what} models: it pulls GGUFs from the Hugging Face Hub "
        "(POST /api/pull with hf.co/user/repo:QUANT, or `modelrouter pull user/repo:QUANT`)",
    )


@post("/create", operation_id="ollamaCreate", tags=_TAGS, status_code=HTTP_200_OK, responses=ollama_errors(400, 401))
async def create(data: o.CreateBody, request: Request[Any, Any, Any]) -> o.Empty:
    """Refused: models come from the Hub (or the models dir), not from Modelfiles."""
    del data
    raise _hub_only(request)


@post("/push", operation_id="ollamaPush", tags=_TAGS, status_code=HTTP_200_OK, responses=ollama_errors(400, 401))
async def push(data: o.ModelBody, request: Request[Any, Any, Any]) -> o.Empty:
    """Refused: modelrouter only downloads from the Hub."""
    del data
    raise _hub_only(request)
