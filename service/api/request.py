"""The request class of the app, and the checks every request passes first.

Why a subclass: Litestar decodes a JSON body without a type before it
validates it, and the decoder recurses once per nesting level, so
``{"model":[[[[…`` (100,000 levels) raised ``RecursionError`` -- a 500. Here it
is the 400 it deserves, however the body is read (typed ``data``, or the
proxy's own read).
"""

from __future__ import annotations

import re
from typing import Any

from litestar import Request

from service.api.problems import Problem

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ApiRequest(Request[Any, Any, Any]):
    """A request whose JSON body is never nested deeper than the decoder can go."""

    async def json(self) -> Any:
        try:
            return await super().json()
        except RecursionError:
            raise Problem(
                400, "invalid_request", "request body is nested too deeply to be a request (over ~1000 levels)"
            ) from None


async def reject_control_characters(request: Request[Any, Any, Any]) -> None:
    """``before_request`` hook: a control character in a query value is never a
    name, a type or a position (it is a typo, or log injection): 400."""
    for name, value in request.query_params.multi_items():
        if _CONTROL.search(value) or _CONTROL.search(name):
            raise Problem(
                400,
                "invalid_request",
                f"query parameter {name!r} holds a control character",
                parameter=name,
            )
