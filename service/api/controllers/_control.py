"""llama-server's ``POST /v1/chat/completions/control``, routed by the completion's id.

``{"id": <a chat completion's id>, "action": "reasoning_end"}`` ends the reasoning of that chat
while it runs (the worker's :mod:`workers.inference.http.dialects._control`). In single-model mode it goes
to the one model, and a body that names a ``model`` goes to that model's worker, as llama-server's
router sends it (``proxy_post``). A body that names none, which llama-server's router refuses, is
routed by the id instead: the router asks the worker of every model that runs now, on this node
and, in a cluster, on the others (through their node, the model named), and answers with the one
that has a completion under that id. None has: llama-server's ``{"success": false, "message":
"no active completion for this id"}``. Completions are not tracked on the way through: a worker
knows its own, and asking the few running ones costs a local round trip each.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from litestar import Request, Response, post
from litestar.status_codes import HTTP_200_OK

from service.api import schemas as s
from service.api.controllers._proxy_routes import PROXIED_ANSWER, PROXIED_PROBLEMS, Autoload, named_model
from service.api.principal import principal_of
from service.api.problems import Problem
from service.api.proxy import Forwarding, proxy_request, send_upstream
from service.api.scopes import visible
from service.core.errors import CommandRejected
from service.core.keys import Principal
from service.core.state import InstanceStatus

PATH = "/v1/chat/completions/control"
ACTIONS = ("reasoning_end",)
NOT_FOUND = {"success": False, "message": "no active completion for this id"}  # llama-server's words


def _running(fwd: Forwarding, caller: Principal) -> list[str]:
    """The models whose worker is ready now, wherever it runs, that the caller may use."""
    models = [m for m in fwd.live.state.models.values() if visible(caller, m)]
    return sorted(m.name for m in models if m.instance is not None and m.instance.status is InstanceStatus.READY)


async def _ask(request: Request[Any, Any, Any], fwd: Forwarding, model: str, body: dict[str, Any]) -> Any:
    """The control's answer from ``model``'s worker, or None (it stopped, failed, or refused)."""
    try:
        lease = await fwd.instances.acquire(model, autoload=False)
    except CommandRejected:
        return None  # it stopped meanwhile
    instance = fwd.live.state.models[lease.model].instance  # the one the lease holds
    instance_id = instance.instance_id if instance is not None else ""
    payload = json.dumps({**body, "model": model}).encode()  # another node routes it by its model
    try:
        upstream = await send_upstream(fwd, request, lease.endpoint + PATH, payload, lease, instance_id)
        try:
            content = await upstream.aread()
        finally:
            await upstream.aclose()
        return json.loads(content) if upstream.status_code == 200 else None
    except (Problem, ValueError):
        return None  # a worker that cannot answer has no completion to act on
    finally:
        lease.release()


async def _by_id(request: Request[Any, Any, Any], fwd: Forwarding, body: dict[str, Any]) -> dict[str, Any]:
    """Ask every running model; the answer of the one that runs the completion, else llama-server's not found."""
    running = _running(fwd, principal_of(request))
    answers = await asyncio.gather(*(_ask(request, fwd, m, body) for m in running))
    found = [a for a in answers if isinstance(a, dict) and a != NOT_FOUND]
    return found[0] if found else NOT_FOUND


def control_route(single: bool) -> Any:
    """The route as the mode declares it."""
    description = (
        "Routed to the one model (`model` is ignored)."
        if single
        else "Routed to the worker of the body's `model`; without one, to the model that runs the completion `id`."
    )

    @post(
        PATH,
        operation_id="postV1ChatCompletionsControl",
        tags=["inference"],
        status_code=HTTP_200_OK,
        description=f"llama-server's control of a running chat completion (`reasoning_end`). {description}",
        responses={**PROXIED_ANSWER, **PROXIED_PROBLEMS},
    )
    async def post_control(
        data: s.ControlRequest, request: Request[Any, Any, Any], forwarding: Forwarding, autoload: Autoload = None
    ) -> Response[Any]:
        """``{"id", "action": "reasoning_end"}`` → ``{"success": true}``, or ``false`` with a ``message``."""
        model = named_model(data.model)
        if forwarding.mode.single or model:
            return await proxy_request(request, forwarding, model, autoload)
        if not data.id:
            raise Problem(400, "invalid_request", "missing completion id")
        if data.action not in ACTIONS:
            raise Problem(400, "invalid_request", "unknown control action")
        return Response(await _by_id(request, forwarding, {"id": data.id, "action": data.action}))

    return post_control
