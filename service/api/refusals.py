"""A key's refusal (out of scope 403, over its limit 429, expired 401) in the shape of the API being
spoken (issue 34): Ollama's ``{"error": "..."}`` on ``/api/*``, Anthropic's ``{"type": "error",
"error": {"type", "message"}}`` on ``/v1/messages``, else problem+json with the OpenAI/llama.cpp
``error`` object beside (``{"message", "type", "code"}``), which the OpenAI clients read. Every shape
names the rule that refused (``rule``), never another key's data. A 429 carries ``Retry-After``.

Two renderings of one decision: :func:`refusal_problem` for handlers (raised, so each router's
exception handlers shape it), :func:`send_refusal` for the raw key middleware (before routing).
"""

from __future__ import annotations

import json

from litestar.types import HTTPResponseBodyEvent, HTTPResponseStartEvent, Send

from service.api.problems import PROBLEM_JSON, Problem, llama_error_type
from service.core.keys import Refusal

ANTHROPIC_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})
_ANTHROPIC_TYPE = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}
_OPENAI_TYPE = {429: "rate_limit_error"}  # llama.cpp has no type for 429: OpenAI's own


def _headers(refusal: Refusal) -> dict[str, str]:
    headers = {"Retry-After": str(refusal.retry_after)} if refusal.retry_after is not None else {}
    if refusal.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return headers


def _error_object(refusal: Refusal, path: str) -> dict[str, object]:
    if path in ANTHROPIC_PATHS:
        return {"type": _ANTHROPIC_TYPE.get(refusal.status, "invalid_request_error"), "message": refusal.message}
    kind = _OPENAI_TYPE.get(refusal.status) or llama_error_type(refusal.status)
    return {"code": refusal.status, "message": refusal.message, "type": kind}


def refusal_problem(refusal: Refusal, path: str) -> Problem:
    """The refusal as a :class:`Problem` for a handler to raise (Ollama's router re-shapes it)."""
    extra: dict[str, object] = {"rule": refusal.rule, "error": _error_object(refusal, path)}
    return Problem(refusal.status, refusal.code, refusal.message, headers=_headers(refusal), **extra)


def refusal_body(refusal: Refusal, path: str) -> tuple[bytes, str]:
    """The body and media type of a refusal answered before routing."""
    if path.startswith("/api/"):
        return json.dumps({"error": refusal.message}).encode(), "application/json"
    body = {
        "type": f"/problems/{refusal.code}",
        "title": refusal.code.replace("_", " "),
        "status": refusal.status,
        "detail": refusal.message,
        "instance": path,
        "rule": refusal.rule,
        "error": _error_object(refusal, path),
    }
    return json.dumps(body).encode(), PROBLEM_JSON


async def send_refusal(send: Send, refusal: Refusal, path: str) -> None:
    """Answer a raw ASGI request with the refusal."""
    body, media = refusal_body(refusal, path)
    headers = [(b"content-type", media.encode()), (b"content-length", str(len(body)).encode())]
    headers += [(name.lower().encode(), value.encode()) for name, value in _headers(refusal).items()]
    await send(HTTPResponseStartEvent(type="http.response.start", status=refusal.status, headers=headers))
    await send(HTTPResponseBodyEvent(type="http.response.body", body=body, more_body=False))
