"""Who makes a request (issue 34), as the key middleware found it, for the handlers that check a
model against the caller's scope, record usage, or filter a listing.

Kept in the ASGI scope (``scope["state"]``, which is also Litestar's ``request.state``), so the raw
middleware and the handlers share it without a lookup. A request the middleware never saw (no key
configured: llama-server's open mode) is :data:`~service.core.keys.ANONYMOUS_PRINCIPAL`.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.types import Scope

from service.core.keys import ANONYMOUS_PRINCIPAL, Principal

_STATE_KEY = "modelrouter_principal"


def set_principal(scope: Scope, principal: Principal) -> None:
    """Record the caller in the request's scope (before routing)."""
    state = scope.setdefault("state", {})
    state[_STATE_KEY] = principal


def principal_of(request: Request[Any, Any, Any] | Scope) -> Principal:
    """The caller of ``request`` (a Litestar request or an ASGI scope)."""
    scope: Any = request.scope if isinstance(request, Request) else request  # Any: either scope type
    found = (scope.get("state") or {}).get(_STATE_KEY)
    return found if isinstance(found, Principal) else ANONYMOUS_PRINCIPAL
