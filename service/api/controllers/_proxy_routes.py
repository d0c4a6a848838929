"""Every llama-server route that names a model is routed to that model's worker.

The table follows llama-server's router mode (``tools/server/server.cpp``):
POST routes name the model in the body's ``model``, GET routes in ``?model=``.
Each route declares its body type (``service.api.schemas``), so a malformed
request is a 400 here, before it can take a model slot or reach a worker.
The worker answers what it serves and 404/501 for what it does not (yet).
(Not routed: ``/v1/audio/transcriptions``, whose multipart body would need
rebuilding, and the conversation-stream routes ``/v1/stream*``.)
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from litestar.status_codes import HTTP_200_OK

from service import __version__
from service.api import schemas as s
from service.api.proxy import Forwarding, proxy_request
from service.api.schemas import ModelParam, problems
from service.settings import Settings

Autoload = Annotated[
    bool | None,
    Parameter(description="Load the model if it is not loaded (default: MODELROUTER_AUTOLOAD); false: 400 instead"),
]
_PROXIED = problems(400, 404, 409, 413, 503, 507)
_ANSWER = {
    200: ResponseSpec(
        data_container=dict[str, Any],
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
    "/v1/chat/completions/control": s.ModelRequest,
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
    "/lora-adapters": s.ModelRequest,
}
GET_ROUTES = ("/lora-adapters", "/slots")  # /metrics: ._metrics (the router's own without ?model=)
_OPERATION_IDS = {
    "/v1/chat/completions": "chatCompletions",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}


def _operation_id(method: str, path: str) -> str:
    words = [w for w in re.split(r"[/_\-]", path) if w]
    return method + "".join(w[:1].upper() + w[1:] for w in words)


def _post_route(path: str, body: type[Any]) -> Any:
    description = f"Routed to the worker of the body's `model` ({body.__name__}; other members pass through)."

    @post(
        path,
        operation_id=_OPERATION_IDS.get(path) or _operation_id("post", path),
        tags=["inference"],
        status_code=HTTP_200_OK,
        description=description,
        responses={**_ANSWER, **_PROXIED},
        signature_namespace={"Body": body},
    )
    async def handler(
        data: Body,  # type: ignore[name-defined]  # noqa: F821  # resolved per route from signature_namespace
        request: Request[Any, Any, Any],
        forwarding: Forwarding,
        autoload: Autoload = None,
    ) -> Response[Any]:
        return await proxy_request(request, forwarding, data.model.strip(), autoload)

    return handler


def _get_route(path: str) -> Any:
    @get(
        path,
        operation_id=_operation_id("get", path),
        tags=["inference"],
        description="Routed to the worker of `?model=`.",
        responses={**_ANSWER, **_PROXIED},
    )
    async def handler(
        request: Request[Any, Any, Any], forwarding: Forwarding, model: ModelParam, autoload: Autoload = None
    ) -> Response[Any]:
        return await proxy_request(request, forwarding, model.strip(), autoload)

    return handler


def _build_info() -> str:
    try:
        engine = version("llama-cpp-python")
    except PackageNotFoundError:
        engine = "unknown"
    return f"b0-modelrouter-{__version__}-llama-cpp-python-{engine}"


BUILD_INFO = _build_info()


@get(
    "/props",
    operation_id="getProps",
    tags=["inference"],
    responses={
        200: ResponseSpec(
            data_container=s.RouterProps,
            description="The router's properties; with `?model=`, that model's worker's `/props`",
            generate_examples=False,
        ),
        **_PROXIED,
    },
)
async def get_props(
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    settings: Settings,
    model: ModelParam | None = None,
    autoload: Autoload = None,
) -> Response[Any]:
    """llama.cpp router's ``GET /props``: its own role and limits, or with ``?model=``
    the model's own properties, from its worker."""
    if model is not None:
        return await proxy_request(request, forwarding, model.strip(), autoload)
    props = s.RouterProps(
        role="router",
        max_instances=settings.models_max,
        models_autoload=settings.autoload,
        model_alias="llama-server",
        model_path="none",
        default_generation_settings=s.GenerationSettings(params={}, n_ctx=0),
        build_info=BUILD_INFO,
    )
    return Response(props)


@post(
    "/slots/{id_slot:int}",
    operation_id="postSlotsAction",
    tags=["inference"],
    status_code=HTTP_200_OK,
    description="Routed to the worker of the body's `model` (slot save/restore/erase).",
    responses={**_ANSWER, **_PROXIED},
)
async def post_slot(
    data: s.ModelRequest,
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    id_slot: Annotated[int, Parameter(ge=0, le=1_000_000)],
    autoload: Autoload = None,
) -> Response[Any]:
    """llama-server's ``POST /slots/{id}?action=save|restore|erase``."""
    del id_slot  # part of the forwarded path
    return await proxy_request(request, forwarding, data.model.strip(), autoload)


proxy_routes = [
    *(_post_route(path, body) for path, body in POST_ROUTES.items()),
    *(_get_route(path) for path in GET_ROUTES),
    get_props,
    post_slot,
]
"""Every routed handler, for the route collection (``service.api.controllers.route_handlers``)."""
