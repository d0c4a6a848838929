"""Errors as the inference worker's HTTP front answers them, the engine's included.

Body shape (llama.cpp's server's): ``{"error": {"message": str, "type": str, "code": int}}``.
An engine error (:mod:`workers.inference.engine._errors`) carries only its message; its
class decides the status and the type here, in one table.
"""

from __future__ import annotations

from workers.inference.engine import (
    EngineError,
    EngineFailed,
    EngineNotReady,
    EngineStopping,
    RequestCancelled,
    RequestRejected,
)
from workers.inference.http._json import JsonObject


class ApiError(Exception):
    """An error answered to the client as JSON with ``status``."""

    def __init__(
        self, status: int, message: str, type: str = "invalid_request_error", extra: JsonObject | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.extra = extra or {}  # llama-server's additions (exceed_context_size_error: n_prompt_tokens, n_ctx)

    def body(self) -> JsonObject:
        return {"error": {"code": self.status, "message": self.message, "type": self.type, **self.extra}}


_ANSWERS: dict[type[EngineError], tuple[int, str]] = {
    EngineNotReady: (503, "unavailable_error"),
    EngineStopping: (503, "unavailable_error"),
    RequestCancelled: (499, "cancelled"),  # nginx's "client closed request": nobody is left to answer
    RequestRejected: (400, "invalid_request_error"),
    EngineFailed: (500, "server_error"),
    EngineError: (500, "server_error"),  # a kind of engine error this table does not name yet
}


def answer_for(err: ApiError | EngineError) -> ApiError:
    """The HTTP answer to ``err``: an :class:`ApiError` as it is, an engine error by its class."""
    if isinstance(err, ApiError):
        return err
    status, kind = next(_ANSWERS[cls] for cls in type(err).__mro__ if cls in _ANSWERS)
    return ApiError(status, err.message, kind)


def too_long(size: str, limit: int, n_ctx: int, n_prompt: int) -> ApiError:
    """llama-server's ``exceed_context_size_error`` for a prompt over ``limit`` tokens (``size`` says how big).

    When the slot's context is the limit and the prompt was counted, llama-server's own words; else
    (``--max-prompt-tokens``, or a prompt refused by its size in bytes before tokenizing) ours name the limit."""
    if limit >= n_ctx - 1 and size == f"{n_prompt} tokens":
        msg = f"request ({n_prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
        return ApiError(400, msg, "exceed_context_size_error", {"n_prompt_tokens": n_prompt, "n_ctx": n_ctx})
    msg = (
        f"the prompt is {size}, over this model's limit of {limit} prompt tokens "
        f"(max_prompt_tokens; the context holds {n_ctx} tokens)"
    )
    return ApiError(400, msg, "exceed_context_size_error", {"n_prompt_tokens": n_prompt, "n_ctx": n_ctx})
