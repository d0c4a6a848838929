"""Wire types shared by every route: model names and problem details (RFC 9457).

Why msgspec Structs: Litestar validates request bodies and parameters against
them before a handler runs (a bad field is a 400 naming it), renders them
without a dict in between, and derives ``/schema`` from them, so the schema a
client or a fuzzer reads is the one the code enforces.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter

PROBLEM_JSON = "application/problem+json"
MAX_NAME_LENGTH = 512
"""Longest model name accepted anywhere: a Hub id is at most 96 characters, plus
``:QUANT`` (64) and ``@revision`` (255); local names are file names (255)."""

_NAME_PATTERN = r"^[^\x00-\x1f\x7f]*\S[^\x00-\x1f\x7f]*$"
_NAME_DESCRIPTION = "A model's name or alias: `user/repo[:QUANT][@revision]`, a local model's name, or an alias."

ModelName = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=_NAME_PATTERN,
        description=_NAME_DESCRIPTION,
        examples=["ggml-org/gemma-3-1b-it-GGUF:Q4_K_M"],
    ),
]
"""Any name a client may use for a model, in a body; whether it exists is the handler's question."""

ModelParam = Annotated[
    str, Parameter(min_length=1, max_length=MAX_NAME_LENGTH, pattern=_NAME_PATTERN, description=_NAME_DESCRIPTION)
]
"""The same, as ``?model=`` (Litestar applies a query parameter's constraints from ``Parameter``)."""

ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "not_supported_error",
    "unavailable_error",
    "server_error",
    "feature_disabled",
]


class ErrorObject(msgspec.Struct, frozen=True):
    """llama.cpp's (and OpenAI's) ``error`` member, so their clients show the message
    (``code`` left out only where llama-server leaves it out: its 403 ``feature_disabled``)."""

    message: str
    type: ErrorType
    code: int | msgspec.UnsetType = msgspec.UNSET


class FieldError(msgspec.Struct, frozen=True):
    """One invalid field of a request, as the framework found it."""

    message: str
    key: str | msgspec.UnsetType = msgspec.UNSET
    source: str | msgspec.UnsetType = msgspec.UNSET


class ProblemDetails(msgspec.Struct, frozen=True):
    """Every error answer (``application/problem+json``). Members beyond RFC 9457's
    depend on the problem; the common ones are declared here."""

    type: str
    title: str
    status: int
    detail: str
    instance: str
    error: ErrorObject
    errors: list[FieldError] | msgspec.UnsetType = msgspec.UNSET
    parameter: str | msgspec.UnsetType = msgspec.UNSET
    model: str | msgspec.UnsetType = msgspec.UNSET
    known_types: list[str] | msgspec.UnsetType = msgspec.UNSET
    available_quants: list[str] | msgspec.UnsetType = msgspec.UNSET
    limit: int | msgspec.UnsetType = msgspec.UNSET
    extra: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET  # free-form: a problem type's own members


_WHY = {
    400: "Invalid request: a field, parameter or header is wrong (named in `detail` and `errors`)",
    401: "Not authorised (the Hub refused the token)",
    403: (
        "Forbidden (a named key's scope does not allow the model or route, `rule` names it; a gated repo "
        "the token cannot read; a feature llama-server has off)"
    ),
    404: "Not found",
    409: "Conflict with the model's or job's current state",
    413: "Request body larger than the route's limit",
    422: "The repository holds no usable GGUF",
    501: "Not supported: llama-server's answer for an endpoint it has off (`/metrics` without --metrics)",
    424: "The Hub could not be reached (an upstream failure)",
    503: "Unavailable: no slot, a failed model, too many streams, or the live state is behind (`Retry-After`)",
    507: (
        "Not enough storage: disk for a download, memory for a model (`insufficient_memory`, its need named), "
        "or the event log's disk (`log_disk_full`: nothing was recorded)"
    ),
}


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """``responses=`` for a route: each listed status is answered with a problem."""
    return {
        status: ResponseSpec(
            data_container=ProblemDetails, media_type=PROBLEM_JSON, description=_WHY[status], generate_examples=False
        )
        for status in statuses
    }
