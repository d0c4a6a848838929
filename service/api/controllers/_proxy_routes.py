"""Every llama-server route that names a model is routed to that model's worker.

The table follows llama-server's router mode (``tools/server/server.cpp``):
POST routes name the model in the body's ``model``, GET routes in ``?model=``.
Each route declares its body type (``service.api.schemas``), so a malformed
request is a 400 here, before it can take a model slot or reach a worker.
The worker answers what it serves and 404/501 for what it does not (yet).
OpenAI's ``/v1/audio/transcriptions`` is a multipart form: the router reads its
``model`` field and forwards the body unchanged. The conversation-stream routes
``/v1/stream*`` go by conversation, not by model: :mod:`._stream_routes`.

In single-model mode (``-m``/``-hf``, :mod:`service.core.server_mode`) the
same routes go to the one model whatever they name, so their declared bodies
and parameters make ``model`` optional (:func:`proxy_routes` builds the
handlers for the mode, and ``/schema`` says what each mode accepts).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    OpenAPIFormat,
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    Reference,
    RequestBody,
    Schema,
)
from litestar.params import Parameter, SkipValidation
from litestar.status_codes import HTTP_200_OK

from service import __version__
from service.api import schemas as s
from service.api.problems import Problem
from service.api.proxy import Forwarding, proxy_request
from service.api.schemas import ModelParam, model_optional, problems
from service.api.scopes import require_model
from service.api.views import sleeping_props
from service.core.keys import Principal
from service.core.server_mode import served_name, target_model
from service.core.state import ModelStatus
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.sleep import SleepSnapshots

Autoload = Annotated[
    bool | None,
    Parameter(description="Load the model if it is not loaded (default: MODELROUTER_AUTOLOAD); false: 400 instead"),
]
PROXIED_PROBLEMS = problems(400, 403, 404, 409, 413, 503, 507)
PROXIED_ANSWER = {
    200: ResponseSpec(
        data_container=dict[str, Any],  # free-form: the worker's answer, documented, never parsed here
        description="The worker's answer (llama-server's or OpenAI's shape; `stream: true` gives text/event-stream)",
        generate_examples=False,
    )
}

# path -> body type, in server.cpp's order; the first three keep their historical operation ids.
POST_ROUTES: dict[str, type[Any]] = {
    "/v1/chat/completions": s.ChatRequest,
    "/v1/completions": s.CompletionRequest,
    "/v1/embeddings": s.EmbeddingRequest,
    "/props": s.ModelRequest,
    "/completion": s.CompletionRequest,
    "/completions": s.CompletionRequest,
    "/chat/completions": s.ChatRequest,
    "/v1/chat/completions/control": s.ControlRequest,  # its own route: ._control
    "/v1/responses": s.ModelRequest,
    "/responses": s.ModelRequest,
    "/v1/messages": s.ModelRequest,
    "/v1/messages/count_tokens": s.ModelRequest,
    "/infill": s.InfillRequest,
    "/embedding": s.LlamaEmbeddingRequest,
    "/embeddings": s.LlamaEmbeddingRequest,
    "/rerank": s.RerankRequest,
    "/reranking": s.RerankRequest,
    "/v1/rerank": s.RerankRequest,
    "/v1/reranking": s.RerankRequest,
    "/tokenize": s.TokenizeRequest,
    "/detokenize": s.DetokenizeRequest,
    "/apply-template": s.ApplyTemplateRequest,
    "/chat/completions/input_tokens": s.ChatRequest,
    "/v1/chat/completions/input_tokens": s.ChatRequest,
    "/responses/input_tokens": s.ModelRequest,
    "/v1/responses/input_tokens": s.ModelRequest,
}
OWN_ROUTES = ("/v1/chat/completions/control",)  # routed by more than the model (._control)
GET_ROUTES = ("/lora-adapters", "/slots")  # /metrics: ._metrics (the router's own without ?model=)
_OPERATION_IDS = {
    "/v1/chat/completions": "chatCompletions",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}


def _operation_id(method: str, path: str) -> str:
    words = [w for w in re.split(r"[/_\-]", path) if w]
    return method + "".join(w[:1].upper() + w[1:] for w in words)


def named_model(model: object) -> str | None:
    """The name a body or query gives (UNSET or None in single-model mode when it gives none)."""
    return model.strip() if isinstance(model, str) else None


def _post_route(path: str, body: type[Any], single: bool) -> Any:
    description = f"Routed to the worker of the body's `model` ({body.__name__}; other members pass through)."
    if single:
        description = f"Routed to the one model, whatever the body's `model` names ({body.__name__})."

    @post(
        path,
        operation_id=_OPERATION_IDS.get(path) or _operation_id("post", path),
        tags=["inference"],
        status_code=HTTP_200_OK,
        description=description,
        responses={**PROXIED_ANSWER, **PROXIED_PROBLEMS},
        signature_namespace={"Body": model_optional(body) if single else body},
    )
    async def handler(
        data: Body,  # type: ignore[name-defined]  # noqa: F821  # resolved per route from signature_namespace
        request: Request[Any, Any, Any],
        forwarding: Forwarding,
        autoload: Autoload = None,
    ) -> Response[Any]:
        return await proxy_request(request, forwarding, named_model(data.model), autoload)

    return handler


def _get_route(path: str, single: bool) -> Any:
    decorate = get(
        path,
        operation_id=_operation_id("get", path),
        tags=["inference"],
        description="Routed to the one model (`?model=` is ignored)."
        if single
        else "Routed to the worker of `?model=`.",
        responses={**PROXIED_ANSWER, **PROXIED_PROBLEMS},
    )
    if single:

        async def one_model(
            request: Request[Any, Any, Any],
            forwarding: Forwarding,
            model: ModelParam | None = None,
            autoload: Autoload = None,
        ) -> Response[Any]:
            return await proxy_request(request, forwarding, model, autoload)

        return decorate(one_model)

    async def handler(
        request: Request[Any, Any, Any], forwarding: Forwarding, model: ModelParam, autoload: Autoload = None
    ) -> Response[Any]:
        return await proxy_request(request, forwarding, model.strip(), autoload)

    return decorate(handler)


def _build_info() -> str:
    try:
        engine = version("llama-cpp-python")
    except PackageNotFoundError:
        engine = "unknown"
    return f"b0-modelrouter-{__version__}-llama-cpp-python-{engine}"


BUILD_INFO = _build_info()


def _router_props(settings: Settings) -> s.RouterProps:
    return s.RouterProps(
        role="router",
        max_instances=settings.models_max,
        models_autoload=settings.autoload,
        model_alias="llama-server",
        model_path="none",
        default_generation_settings=s.GenerationSettings(params={}, n_ctx=0),
        build_info=BUILD_INFO,
    )


def _props_route(single: bool) -> Any:
    answer = (
        ResponseSpec(
            data_container=dict[str, Any],  # free-form: the worker's /props, documented, never parsed here
            description="The model's properties (llama-server's `/props`)",
            generate_examples=False,
        )
        if single
        else ResponseSpec(
            data_container=s.RouterProps,
            generate_examples=False,
            description="The router's properties; with `?model=`, that model's worker's `/props`",
        )
    )

    @get("/props", operation_id="getProps", tags=["inference"], responses={200: answer, **PROXIED_PROBLEMS})
    async def get_props(
        request: Request[Any, Any, Any],
        forwarding: Forwarding,
        settings: Settings,
        live: LiveState,
        snapshots: SkipValidation[SleepSnapshots | None],
        caller: Principal,
        model: ModelParam | None = None,
        autoload: Autoload = None,
    ) -> Response[Any]:
        """llama.cpp's ``GET /props``: the router's role and limits, or with ``?model=`` (and in
        single-model mode always) the model's own properties, from its worker; a sleeping model's
        from what its worker said before it slept (``is_sleeping: true``), without waking it."""
        if model is None and not forwarding.mode.single:
            return Response(_router_props(settings))
        name = target_model(forwarding.mode, model)
        require_model(caller, live.state, name, request.url.path)  # a sleeping model's props too
        found = live.state.resolve(name)
        if found is not None and found.status is ModelStatus.SLEEPING:
            cached = snapshots.props(found.name) if snapshots is not None else None
            return Response(cached or sleeping_props(found, BUILD_INFO, served_name(forwarding.mode, found.name)))
        return await proxy_request(request, forwarding, name, autoload)

    return get_props


@post(
    "/lora-adapters",
    operation_id="postLoraAdapters",
    tags=["inference"],
    status_code=HTTP_200_OK,
    description="Routed to the worker of `?model=`: llama-server's array of `{id, scale}` (the body is an "
    "array, so the model is named in the query).",
    responses={**PROXIED_ANSWER, **PROXIED_PROBLEMS},
)
async def post_lora_adapters(
    data: list[s.LoraScale],
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    model: ModelParam | None = None,
    autoload: Autoload = None,
) -> Response[Any]:
    """llama-server's ``POST /lora-adapters``: new scales for the model's ``--lora`` adapters
    (``?model=`` names it; in single-model mode it is the one model)."""
    del data  # validated here, forwarded as received
    return await proxy_request(request, forwarding, named_model(model), autoload)


def _post_slot(single: bool) -> Any:
    @post(
        "/slots/{id_slot:int}",
        operation_id="postSlotsAction",
        tags=["inference"],
        status_code=HTTP_200_OK,
        description="Routed to the worker of the body's `model` (slot save/restore/erase).",
        responses={**PROXIED_ANSWER, **PROXIED_PROBLEMS},
        signature_namespace={"SlotBody": model_optional(s.ModelRequest) if single else s.ModelRequest},
    )
    async def post_slot(
        data: SlotBody,  # type: ignore[name-defined]  # noqa: F821  # from signature_namespace, per mode
        request: Request[Any, Any, Any],
        forwarding: Forwarding,
        id_slot: Annotated[int, Parameter(ge=0, le=1_000_000)],
        autoload: Autoload = None,
    ) -> Response[Any]:
        """llama-server's ``POST /slots/{id}?action=save|restore|erase``."""
        del id_slot  # part of the forwarded path
        return await proxy_request(request, forwarding, named_model(data.model), autoload)

    return post_slot


TRANSCRIPTION_ROUTES = ("/v1/audio/transcriptions", "/audio/transcriptions")


async def _form_model(request: Request[Any, Any, Any]) -> str | None:
    """The ``model`` a transcription names: a form field (OpenAI's multipart shape), or a JSON
    member, as llama.cpp's router reads the form's fields as a JSON body."""
    if request.content_type[0] == "application/json":
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise Problem(400, "invalid_request", "request body is not valid JSON") from None
        return named_model(body.get("model")) if isinstance(body, dict) else None
    await request.body()  # read (and kept) first: form() then parses the kept body, which is forwarded
    form = await request.form()
    return named_model(form.get("model"))


def _form_operation(single: bool) -> type[Operation]:
    """An OpenAPI operation whose body is OpenAI's transcription form (the handler reads the raw body,
    so Litestar cannot derive it)."""
    text = Schema(type=OpenAPIType.STRING)
    fields: dict[str, Schema | Reference] = {
        "file": Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.BINARY, description="the sound (WAV, MP3, FLAC)"),
        "model": text,
        "prompt": text,
        "language": text,
        "response_format": Schema(type=OpenAPIType.STRING, enum=["json"]),
        "stream": Schema(type=OpenAPIType.STRING, enum=["true", "false"]),
        "max_tokens": text,
        "temperature": text,
    }
    form = Schema(type=OpenAPIType.OBJECT, properties=fields, required=["file"] if single else ["file", "model"])

    @dataclass
    class FormOperation(Operation):
        def __post_init__(self) -> None:
            self.request_body = RequestBody(
                content={"multipart/form-data": OpenAPIMediaType(schema=form)}, required=True
            )

    return FormOperation


def _transcription_route(path: str, single: bool) -> Any:
    description = "OpenAI's audio transcription (a multipart form: `file`, `model`, `prompt`, `language`, ...), "
    description += "forwarded unchanged to the one model." if single else "forwarded unchanged to the form's `model`."

    @post(
        path,
        operation_id=_operation_id("post", path),
        tags=["inference"],
        status_code=HTTP_200_OK,
        description=description,
        responses={**PROXIED_ANSWER, **PROXIED_PROBLEMS},
        operation_class=_form_operation(single),
    )
    async def handler(
        request: Request[Any, Any, Any], forwarding: Forwarding, autoload: Autoload = None
    ) -> Response[Any]:
        return await proxy_request(request, forwarding, await _form_model(request), autoload)

    return handler


def proxy_routes(*, single: bool) -> list[Any]:
    """Every routed handler, for the route collection (``service.api.controllers.route_handlers``);
    ``single``: as single-model mode declares them (``model`` optional)."""
    return [
        *(_post_route(path, body, single) for path, body in POST_ROUTES.items() if path not in OWN_ROUTES),
        *(_get_route(path, single) for path in GET_ROUTES),
        *(_transcription_route(path, single) for path in TRANSCRIPTION_ROUTES),
        _props_route(single),
        _post_slot(single),
        post_lora_adapters,
    ]
