"""RFC 9457 problem details for every error the API returns.

Handlers raise :class:`Problem` (or let a ``CommandRejected`` escape); the
framework raises its own ``HTTPException`` for invalid fields, unknown routes
and oversized bodies. All of them are rendered here as
``application/problem+json``, with llama.cpp's ``error`` object beside
(``{"code", "message", "type"}``, its ``type`` values), so both problem-aware
clients and llama.cpp/OpenAI clients read the message. Anything else that
escapes is a bug: logged with its traceback and answered 500.
"""

from __future__ import annotations

from typing import Any

import structlog
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.handlers import HTTPRouteHandler

from service.api.schemas import PROBLEM_JSON
from service.core.errors import CommandRejected
from service.event_store.live_state import StateUnavailable
from service.event_store.rows import LogDiskFull, StoreUnavailable

_log = structlog.get_logger(__name__)

ProblemBody = dict[str, object]
"""An ``application/problem+json`` body: RFC 9457's members, llama.cpp's ``error`` beside them, and the
extension members a problem adds (``errors``, ``limit``, ``location``, a rejection's own): free-form
by design, as RFC 9457 lets each problem type add its own (schema: ``ProblemDetails``)."""
FieldProblem = dict[str, object]
"""One invalid field as Litestar reports it (``key``, ``message``, ``source``), passed on as it came."""

# CommandRejected.code -> HTTP status; codes are also the problem "type" suffix.
# Exactly the codes the service raises as CommandRejected (tests/api/test_problems.py);
# a Problem carries its own status.
_STATUS_BY_CODE = {
    "model_not_found": 404,
    "job_not_found": 404,
    "key_not_found": 404,
    "invalid_request": 400,
    "conflict": 409,
    "model_loaded": 409,
    "not_running": 409,
    "model_not_loaded": 400,  # llama.cpp: 400 "model is not loaded" when autoload is off
    "model_missing": 400,  # llama.cpp's router: 400 "model name is missing from the request"
    "model_failed": 503,
    "capacity": 503,
    "insufficient_memory": 507,  # ours: the model's estimated need exceeds the memory models may use
}

# llama.cpp's own wording for the same refusal, for clients that match on error.message
# (router_validate_model in server-models.cpp); our detail keeps the model's name.
_LLAMA_MESSAGE = {
    "model_not_loaded": "model is not loaded",
}

# llama.cpp's format_error_response: its error types and the status each has.
_LLAMA_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    501: "not_supported_error",
    503: "unavailable_error",
    424: "unavailable_error",  # the Hub is unavailable: llama.cpp has no closer type
}


def llama_error_type(status: int) -> str:
    """llama.cpp's ``error.type`` for a status: its own where it has one, else
    ``invalid_request_error`` for 4xx and ``server_error`` for 5xx."""
    return _LLAMA_TYPE.get(status, "invalid_request_error" if status < 500 else "server_error")


class Problem(Exception):
    """An error response. ``code`` names the problem type (``/problems/<code>``);
    ``extra`` members are added to the body, ``headers`` to the response."""

    def __init__(
        self, status: int, code: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra


def problem_response(request: Request[Any, Any, Any], problem: Problem) -> Response[ProblemBody]:
    """The one renderer of error bodies (schema: ``ProblemDetails``)."""
    body: ProblemBody = {
        "type": f"/problems/{problem.code}",
        "title": problem.code.replace("_", " "),
        "status": problem.status,
        "detail": problem.detail,
        "instance": request.url.path,
        **problem.extra,
    }
    body.setdefault(
        "error", {"code": problem.status, "message": problem.detail, "type": llama_error_type(problem.status)}
    )
    return Response(body, status_code=problem.status, media_type=PROBLEM_JSON, headers=problem.headers)


def _on_problem(request: Request[Any, Any, Any], exc: Problem) -> Response[ProblemBody]:
    return problem_response(request, exc)


def _on_rejected(request: Request[Any, Any, Any], exc: CommandRejected) -> Response[ProblemBody]:
    status = _STATUS_BY_CODE.get(exc.code, 409)
    headers = {"Retry-After": "1"} if status == 503 else None  # capacity, queue full, failed model: worth a retry soon
    extra = dict(exc.extra)
    if exc.code in _LLAMA_MESSAGE:
        extra.setdefault(
            "error", {"code": status, "message": _LLAMA_MESSAGE[exc.code], "type": llama_error_type(status)}
        )
    return problem_response(request, Problem(status, exc.code, exc.message, headers=headers, **extra))


def _wire_name(request: Request[Any, Any, Any], key: str) -> str:
    """The name the client used: ``Last-Event-ID`` for ``last_event_id``, ``type`` for ``types``."""
    field = request.route_handler.parsed_fn_signature.parameters.get(key)
    kwarg = getattr(field, "kwarg_definition", None)
    return getattr(kwarg, "header", None) or getattr(kwarg, "query", None) or key


def _field_errors(request: Request[Any, Any, Any], exc: ValidationException) -> list[FieldProblem]:
    extra = exc.extra if isinstance(exc.extra, list) else [exc.extra] if exc.extra else []
    errors: list[FieldProblem] = [dict(e) if isinstance(e, dict) else {"message": str(e)} for e in extra]
    for error in errors:
        key = error.get("key")
        if isinstance(key, str):
            error["key"] = _wire_name(request, key)
    return errors


def _on_http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[ProblemBody]:
    status = exc.status_code
    extra: ProblemBody = {}
    detail = str(exc.detail)
    if isinstance(exc, ValidationException):
        errors = _field_errors(request, exc)
        if errors:
            extra["errors"] = errors
            named = "; ".join(f"{e['key']}: {e['message']}" if e.get("key") else str(e["message"]) for e in errors)
            detail = f"{detail}: {named}"
    code = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(
        status, f"http_{status}"
    )
    if status == 413:
        limit = request.route_handler.resolve_request_max_body_size()
        if limit:
            extra["limit"] = limit
            detail = f"request body larger than this route's limit of {limit} bytes"
    if status >= 500:
        _log.error("http_exception", status=status, detail=exc.detail)
    return problem_response(request, Problem(status, code, detail, headers=dict(exc.headers or {}), **extra))


def _on_stale(request: Request[Any, Any, Any], exc: StateUnavailable) -> Response[ProblemBody]:
    return problem_response(request, Problem(503, "state_unavailable", str(exc), headers={"Retry-After": "1"}))


def _on_store_down(request: Request[Any, Any, Any], exc: StoreUnavailable) -> Response[ProblemBody]:
    _log.error("store_unavailable", detail=str(exc))
    return problem_response(request, Problem(503, "store_unavailable", str(exc), headers={"Retry-After": "1"}))


_NO_507 = frozenset({"inference", "ollama"})
"""Routes speaking another server's API (llama-server's, OpenAI's, Anthropic's, Ollama's): none has a
507, and their clients read a 503 as "retry later", which a full log disk is."""


def _on_log_full(request: Request[Any, Any, Any], exc: LogDiskFull) -> Response[ProblemBody]:
    _log.error("log_disk_full", detail=str(exc))
    handler = request.scope.get("route_handler")  # none when raised before routing (a middleware's append)
    tags = handler.resolve_tags() if isinstance(handler, HTTPRouteHandler) else ()
    status = 503 if _NO_507 & set(tags) else 507
    problem = Problem(status, "log_disk_full", str(exc), headers={"Retry-After": "5"}, location=exc.location)
    return problem_response(request, problem)


def _on_bug(request: Request[Any, Any, Any], exc: Exception) -> Response[ProblemBody]:
    _log.exception("unhandled_exception", path=request.url.path)
    return problem_response(request, Problem(500, "internal_error", "internal error (a bug): see the service log"))


EXCEPTION_HANDLERS: dict[Any, Any] = {
    Problem: _on_problem,
    CommandRejected: _on_rejected,
    StateUnavailable: _on_stale,
    StoreUnavailable: _on_store_down,
    LogDiskFull: _on_log_full,
    HTTPException: _on_http,
    Exception: _on_bug,
}

__all__ = ["EXCEPTION_HANDLERS", "PROBLEM_JSON", "Problem", "llama_error_type", "problem_response"]
