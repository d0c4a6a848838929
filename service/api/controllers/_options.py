"""Explicit ``OPTIONS`` handlers for paths served by several handlers.

Why: Litestar 2 builds the automatic OPTIONS answer when a path's first
handler is registered and never updates its ``Allow`` when later handlers
join the path, so ``OPTIONS /models`` said ``GET, OPTIONS`` although POST and
DELETE exist. Registered before the other handlers of their path, these
answer with every method of the path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from litestar import Response, route
from litestar.enums import HttpMethod
from litestar.handlers import HTTPRouteHandler
from litestar.status_codes import HTTP_204_NO_CONTENT


def _allow_handler(path: str, methods: frozenset[str]) -> HTTPRouteHandler:
    allow = ", ".join(sorted(methods | {"OPTIONS"}))

    @route(path, http_method=[HttpMethod.OPTIONS], include_in_schema=False, sync_to_thread=False)
    def options() -> Response[None]:
        return Response(None, status_code=HTTP_204_NO_CONTENT, headers={"Allow": allow})

    return options


def options_handlers(handlers: Iterable[Any]) -> list[HTTPRouteHandler]:
    """One OPTIONS handler for each path that more than one method serves."""
    methods: dict[str, set[str]] = defaultdict(set)
    for handler in handlers:
        if isinstance(handler, HTTPRouteHandler):
            for path in handler.paths:
                methods[path] |= set(handler.http_methods)
    return [_allow_handler(path, frozenset(m)) for path, m in sorted(methods.items()) if len(m) > 1]
