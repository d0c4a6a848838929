"""The engine's errors reach clients with the statuses, bodies and types they had when the
engine raised HTTP errors itself (a client, or the router's proxy, tells them apart by these)."""

from __future__ import annotations

import pytest

from workers.inference.engine import (
    EngineError,
    EngineFailed,
    EngineNotReady,
    EngineStopping,
    RequestCancelled,
    RequestRejected,
)
from workers.inference.http import ApiError, answer_for


@pytest.mark.parametrize(
    ("err", "status", "message", "kind"),
    [
        (EngineNotReady(), 503, "model is not ready (loading or stopping)", "unavailable_error"),
        (EngineStopping(), 503, "worker is stopping", "unavailable_error"),
        (RequestCancelled("request cancelled"), 499, "request cancelled", "cancelled"),
        (RequestCancelled("client disconnected"), 499, "client disconnected", "cancelled"),
        (
            RequestRejected("Requested tokens (9) exceed context window of 8"),
            400,
            "Requested tokens (9) exceed context window of 8",
            "invalid_request_error",
        ),
        (EngineFailed("llama_decode failed (-1)"), 500, "llama_decode failed (-1)", "server_error"),
        (EngineError("something new"), 500, "something new", "server_error"),
    ],
)
def test_each_engine_error_has_its_answer(err: EngineError, status: int, message: str, kind: str) -> None:
    answer = answer_for(err)
    assert answer.status == status
    assert answer.body() == {"error": {"message": message, "type": kind, "code": status}}


def test_an_http_error_is_answered_as_it_is() -> None:
    err = ApiError(413, "request body over 5 bytes")
    assert answer_for(err) is err


def test_engine_errors_are_not_value_errors() -> None:
    """The request front turns ValueError and TypeError from chat templates into 400s; an engine
    error passing through a template must keep its own answer."""
    assert not issubclass(EngineError, (ValueError, TypeError))
