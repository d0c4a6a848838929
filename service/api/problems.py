"""RFC 9457 problem details for every error the API returns.

Handlers raise :class:`Problem` (or let a ``CommandRejected`` escape); the
exception handlers below render ``application/problem+json``. Anything else
that escapes is a bug: it is logged with its traceback and answered 500.
"""

from __future__ import annotations

from typing import Any

import structlog
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException

from service.core.errors import CommandRejected
from service.live_state import StateUnavailable

PROBLEM_JSON = "application/problem+json"
_log = structlog.get_logger(__name__)

# CommandRejected.code -> HTTP status; codes are also the problem "type" suffix.
# Exactly the codes the service raises as CommandRejected (tests/api/test_problems.py);
# a Problem carries its own status.
_STATUS_BY_CODE = {
    "model_not_found": 404,
    "job_not_found": 404,
    "conflict": 409,
    "model_loaded": 409,
    "not_running": 409,
    "model_not_loaded": 409,
    "model_failed": 503,
    "capacity": 503,
}


class Problem(Exception):
    """An error response. ``code`` names the problem type (``/problems/<code>``)."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra


def problem_response(request: Request[Any, Any, Any], problem: Problem) -> Response[dict[str, Any]]:
    body = {
        "type": f"/problems/{problem.code}",
        "title": problem.code.replace("_", " "),
        "status": problem.status,
        "detail": problem.detail,
        "instance": request.url.path,
        **problem.extra,
    }
    # The OpenAI error shape too, so OpenAI clients show the message.
    body.setdefault("error", {"message": problem.detail, "type": problem.code, "code": problem.status})
    return Response(body, status_code=problem.status, media_type=PROBLEM_JSON)


def _on_problem(request: Request[Any, Any, Any], exc: Problem) -> Response[dict[str, Any]]:
    return problem_response(request, exc)


def _on_rejected(request: Request[Any, Any, Any], exc: CommandRejected) -> Response[dict[str, Any]]:
    status = _STATUS_BY_CODE.get(exc.code, 409)
    response = problem_response(request, Problem(status, exc.code, exc.message, **exc.extra))
    if status == 503:
        response.headers["Retry-After"] = "1"  # capacity and failed models: worth a retry soon
    return response


def _on_http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    extra: dict[str, Any] = {}
    if isinstance(exc, ValidationException) and exc.extra:
        extra["errors"] = exc.extra
    code = "invalid_request" if exc.status_code == 400 else f"http_{exc.status_code}"
    if exc.status_code >= 500:
        _log.error("http_exception", status=exc.status_code, detail=exc.detail)
    return problem_response(request, Problem(exc.status_code, code, str(exc.detail), **extra))


def _on_stale(request: Request[Any, Any, Any], exc: StateUnavailable) -> Response[dict[str, Any]]:
    response = problem_response(request, Problem(503, "state_unavailable", str(exc)))
    response.headers["Retry-After"] = "1"
    return response


def _on_bug(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    _log.exception("unhandled_exception", path=request.url.path)
    return problem_response(request, Problem(500, "internal_error", "internal error (a bug): see the service log"))


EXCEPTION_HANDLERS: dict[Any, Any] = {
    Problem: _on_problem,
    CommandRejected: _on_rejected,
    StateUnavailable: _on_stale,
    HTTPException: _on_http,
    Exception: _on_bug,
}

__all__ = ["EXCEPTION_HANDLERS", "PROBLEM_JSON", "MediaType", "Problem", "problem_response"]
