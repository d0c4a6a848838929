"""The proxy's decisions: which hop a request takes, whether this node records it, what a failed one is told.

``service/api/proxy.py`` holds a lease, sends, relays and waits; what it decides
along the way is here, over the fold and the facts it observed:

* a request held for a model another node serves goes to that node's service,
  through the pooled node client when the hop is plain HTTP;
* ``request_completed`` is recorded by the node that served the request;
* a worker (or node) that stopped answering is explained: its crash in words,
  its node recorded lost, a worker given up as hung, else the transport error.

Pure module: stdlib only.
"""

from __future__ import annotations

from service.core.errors import CommandRejected
from service.core.instance_lifecycle import crash_rejection
from service.core.liveness import unresponsive_rejection
from service.core.state import UNRESPONSIVE, Instance, ModelState, RouterState


def plain_http(url: str) -> bool:
    """Whether ``url`` is plain HTTP, the one scheme the node client speaks (TLS goes through httpx)."""
    return url.startswith("http://")


def pooled_hop(node: str | None, url: str) -> bool:
    """Whether a request goes to another node's service through the pooled node client (cut at once
    when that node is recorded lost): it is held for a model ``node`` serves, and ``url`` is plain
    HTTP. A local worker (``node`` None), or a node over TLS, is reached through httpx."""
    return node is not None and plain_http(url)


def records_completion(inst: Instance | None, instance_id: str, own_node: str | None) -> bool:
    """Whether this node records ``request_completed`` for a request it sent to ``instance_id``
    (``inst``: the model's instance now): not when that instance runs on another node, which served
    the request and records it."""
    elsewhere = inst is not None and inst.instance_id == instance_id and inst.node not in (None, own_node)
    return not elsewhere


def worker_failure(state: RouterState | None, model: str, node: str | None, error: str) -> CommandRejected:
    """What a request is told (503) whose worker, or forwarded, ``node``'s service, stopped answering
    with the transport error named ``error``. ``state``: the fold once the worker's end was waited
    for (None: not waited for, a timeout, or not seen in time). Its crash in words when the fold
    recorded one, else the serving node recorded lost, else the error's name."""
    found = state.models.get(model) if state is not None else None
    crashed = crash_rejection(found) if found is not None else None
    if crashed is not None:
        return crashed
    serving = state.nodes.get(node) if state is not None and node is not None else None
    if serving is not None and serving.lost:
        message = f"node {node!r}, which served model {model!r}, was lost (recorded by {serving.lost_by!r})"
        return CommandRejected("model_failed", message, model=model, node=node, reason="node_lost")
    where = f"the worker of model {model!r}" if node is None else f"node {node!r} serving model {model!r}"
    return CommandRejected("model_failed", f"{where} stopped answering: {error}", model=model)


def unresponsive_failure(found: ModelState | None, model: str) -> CommandRejected:
    """What a request is told (503) whose worker was given up as hung: the reason
    ``instance_unresponsive`` recorded, or, when a new load replaced that failure meanwhile, still
    that the worker stopped responding."""
    hung = unresponsive_rejection(found) if found is not None else None
    if hung is not None:
        return hung
    message = f"the worker of model {model!r} stopped responding"
    return CommandRejected("model_failed", message, model=model, reason=UNRESPONSIVE)
