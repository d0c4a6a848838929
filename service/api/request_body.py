"""Reading JSON request bodies with problem+json errors instead of 500s."""

from __future__ import annotations

import json
from typing import Any

from litestar import Request

from service.api.problems import Problem


async def json_body(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """The body as a JSON object, or a 400 problem saying what is wrong."""
    return parse_object(await request.body())


def parse_object(raw: bytes) -> dict[str, Any]:
    """Parse ``raw`` as a JSON object (an empty body counts as ``{}``)."""
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise Problem(400, "invalid_request", f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Problem(400, "invalid_request", "request body must be a JSON object")
    return body


def model_field(body: dict[str, Any]) -> str:
    """The ``model`` field, required and non-empty (llama.cpp's wording)."""
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise Problem(
            400, "invalid_request", "model name is missing from the request: 'model' must be a non-empty string"
        )
    return model.strip()


def flag(value: str | None, name: str) -> bool:
    """A boolean query flag (true/false/1/0); anything else is a 400."""
    if value is None:
        return False
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes"}:
        return True
    if lowered in {"0", "false", "no", ""}:
        return False
    raise Problem(
        400, "invalid_request", f"query parameter {name!r} must be true or false, got {value!r}", parameter=name
    )
