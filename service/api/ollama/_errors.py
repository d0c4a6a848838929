"""Errors on the Ollama routes in Ollama's shape: ``{"error": "..."}`` with the status the rest of
the API would give (``service.api.problems`` decides it; only the body differs), so the ``ollama``
clients show the message (``ResponseError.error``) instead of a problem document."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.openapi.datastructures import ResponseSpec

from service.api.problems import EXCEPTION_HANDLERS, Problem, problem_response
from service.core.ollama import InvalidRequest

_WHY = {
    400: "Invalid request (a field, an option, a duration)",
    401: "Missing, wrong or expired API key",
    403: "The key's scope does not allow this model or route (the rule is named)",
    404: "No such model (or not on the Hub)",
    409: "The model is busy being removed, loaded or downloaded, or the name is ambiguous or taken",
    413: "Request body too large",
    424: "The Hub could not be reached",
    503: "No model slot, the model failed, or the log is unavailable: retry later",
    507: "Not enough disk space for the download",
}


class OllamaError(msgspec.Struct, frozen=True):
    """Ollama's error body."""

    error: str


def ollama_errors(*statuses: int) -> dict[int, ResponseSpec]:
    """``responses=`` for an Ollama route: each listed status answers :class:`OllamaError`."""
    return {
        status: ResponseSpec(data_container=OllamaError, description=_WHY[status], generate_examples=False)
        for status in statuses
    }


def error_line(message: str) -> bytes:
    """An error in the middle of an NDJSON stream, as Ollama sends it (its clients raise it)."""
    return json.dumps({"error": message}).encode() + b"\n"


def _as_problem_response(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, InvalidRequest):
        return problem_response(request, Problem(400, "invalid_request", str(exc)))
    for cls in type(exc).__mro__:
        handler = EXCEPTION_HANDLERS.get(cls)
        if handler is not None:
            response: Response[Any] = handler(request, exc)
            return response
    raise exc  # unreachable: Exception is in the table


def on_ollama_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Every exception under ``/api/*``: the problem the API would answer, re-shaped."""
    answer = _as_problem_response(request, exc)
    body = answer.content if isinstance(answer.content, dict) else {}
    message = str(body.get("detail") or body.get("title") or "error")
    if body.get("type") == "/problems/model_not_found" and isinstance(body.get("model"), str):
        message = f'model "{body["model"]}" not found, try pulling it first'  # Ollama's words: clients match them
    return Response({"error": message}, status_code=answer.status_code, headers=answer.headers)


OLLAMA_EXCEPTION_HANDLERS: dict[Any, Any] = {cls: on_ollama_error for cls in (*EXCEPTION_HANDLERS, InvalidRequest)}
"""For the ``/api`` router: the app's keys and ours, so every lookup by type finds this layer's."""
