"""llama-server's resumable streams through the router: ``GET``/``DELETE /v1/stream``, ``POST /v1/streams/lookup``.

As llama.cpp's router (``server-models.cpp``, ``router_stream_get`` and friends):
a conversation goes to the worker of the model its last request carrying
``X-Conversation-Id`` went to (:class:`service.api.conversations.ConversationOwners`,
filled by :func:`service.api.proxy.proxy_request`), while that model is ready.
Nothing here loads or wakes a model: an unloaded model's sessions are gone, so
its conversations are "not found" (a loading one's: 503, retry later), never a 5xx.
The same in single-model mode, where every conversation is the one model's.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
from litestar import Request, Response, delete, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.status_codes import HTTP_200_OK, HTTP_204_NO_CONTENT

from service.api import schemas as s
from service.api.problems import Problem
from service.api.proxy import Forwarding, proxy_request
from service.api.schemas import problems
from service.cluster.forwarding import forward_headers
from service.core.conversation_streams import NoOwner, StreamOwner, stream_owner

_WORKER_TIMEOUT_S = 10.0  # llama.cpp allows its children 250 ms; a Python worker on 2 busy cores needs more
MISSING_ID = "Missing conversation id in path"
NOT_FOUND = "Stream not found or expired"
LOADING = "Stream owner model is loading, retry later"


def _owner(fwd: Forwarding, conv: str) -> StreamOwner | NoOwner:
    return stream_owner(fwd.live.state, fwd.conversations.lookup(conv), fwd.instances.settings.node)


def _conv_id(request: Request[Any, Any, Any]) -> str:
    conv = request.query_params.get("conv_id") or ""
    if not conv:
        raise Problem(400, "invalid_request", MISSING_ID)
    return str(conv)


@get(
    "/v1/stream",
    operation_id="getV1Stream",
    tags=["inference"],
    description="llama-server's resumable stream: `?conv_id=` (the `X-Conversation-Id` of a streamed "
    "completion) from byte `?from=`, replayed then followed to its end, from the worker that serves it.",
    responses={
        200: ResponseSpec(
            data_container=str,
            media_type="text/event-stream",
            generate_examples=False,
            description="The conversation's SSE bytes from `from` on",
        ),
        **problems(400, 404, 503),
    },
)
async def get_stream(request: Request[Any, Any, Any], forwarding: Forwarding) -> Response[Any]:
    """``GET /v1/stream?conv_id=&from=``: 400 without ``conv_id``; 404 for a conversation no ready
    model serves; 503 while its model loads."""
    owner = _owner(forwarding, _conv_id(request))
    if owner is NoOwner.LOADING:
        raise Problem(503, "unavailable", LOADING)
    if not isinstance(owner, StreamOwner):
        raise Problem(404, "not_found", NOT_FOUND)
    return await proxy_request(request, forwarding, owner.model, autoload=False)


@delete(
    "/v1/stream",
    operation_id="deleteV1Stream",
    tags=["inference"],
    status_code=HTTP_204_NO_CONTENT,
    description="llama-server's stop: cancels the conversation's generation and forgets its stream "
    "(idempotent; a request still waiting for its model to load is cancelled too).",
    responses=problems(400),
)
async def delete_stream(request: Request[Any, Any, Any], forwarding: Forwarding) -> Response[None]:
    """``DELETE /v1/stream?conv_id=``: 204 whether or not the conversation is known."""
    conv = _conv_id(request)
    owner = _owner(forwarding, conv)
    if isinstance(owner, StreamOwner):
        url = f"{owner.endpoint}/v1/stream"
        headers = forward_headers(request.headers, (), owner.node)
        with contextlib.suppress(httpx.HTTPError):  # the worker went away: so did its session
            await forwarding.http.delete(url, params={"conv_id": conv}, headers=headers, timeout=_WORKER_TIMEOUT_S)
    forwarding.conversations.forget(conv)  # also cancels a request of it still waiting for its model
    return Response(None, status_code=HTTP_204_NO_CONTENT, media_type="application/json")


def _requested(ids: Any) -> list[str]:
    return [i for i in ids if isinstance(i, str) and i] if isinstance(ids, list) else []


async def _ask(fwd: Forwarding, owner: StreamOwner, ids: list[str], request: Request[Any, Any, Any]) -> list[Any]:
    """One worker's sessions among ``ids``; nothing if it does not answer (as llama.cpp skips it)."""
    try:
        answer = await fwd.http.post(
            f"{owner.endpoint}/v1/streams/lookup",
            json={"conversation_ids": ids},
            headers=forward_headers(request.headers, (), owner.node),
            timeout=_WORKER_TIMEOUT_S,
        )
        found = answer.json() if answer.status_code == 200 else []
    except (httpx.HTTPError, ValueError):
        return []
    return [entry for entry in found if isinstance(entry, dict)] if isinstance(found, list) else []


@post(
    "/v1/streams/lookup",
    operation_id="postV1StreamsLookup",
    tags=["inference"],
    status_code=HTTP_200_OK,
    description='llama-server\'s lookup: `{"conversation_ids": [...]}` → the sessions of those ids (and their '
    "`id::…` sub-conversations) on the workers that serve them, never others.",
    responses={
        200: ResponseSpec(
            data_container=list[dict[str, Any]],  # free-form: the workers' answers, documented, not parsed
            generate_examples=False,
            description="`[{conversation_id, is_done, total_bytes, started_at, completed_at}]`",
        ),
        **problems(400),
    },
)
async def lookup_streams(
    data: s.StreamsLookupRequest, request: Request[Any, Any, Any], forwarding: Forwarding
) -> Response[list[Any]]:
    """Asks only the ready workers that serve some of the ids, each about its own."""
    per_worker: dict[str, tuple[StreamOwner, list[str]]] = {}
    for model, ids in forwarding.conversations.owners(_requested(data.conversation_ids)).items():
        owner = stream_owner(forwarding.live.state, model, forwarding.instances.settings.node)
        if isinstance(owner, StreamOwner):
            per_worker.setdefault(owner.endpoint, (owner, []))[1].extend(ids)
    answers = await asyncio.gather(*(_ask(forwarding, o, ids, request) for o, ids in per_worker.values()))
    return Response([entry for found in answers for entry in found])


stream_routes = [get_stream, delete_stream, lookup_streams]

__all__ = ["stream_routes"]
