"""Where a resumable stream lives: the router's answer for a conversation, given the model that served it.

llama-server's router (``server-models.cpp``, ``resolve_child_for_conv``) remembers
which model a request carrying ``X-Conversation-Id`` went to, and sends the stream
routes (``GET``/``DELETE /v1/stream``, ``POST /v1/streams/lookup``) to that model's
worker while it is ready. A model that is loading again earns a retry; one that is
unloaded, sleeping, failed or gone took its sessions with it: "not found".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import service.core.cluster as cluster
from service.core.state import InstanceStatus, ModelStatus, RouterState


@dataclass(frozen=True, slots=True)
class StreamOwner:
    """The ready worker that holds a conversation's session (``node``: another node's service, else local)."""

    model: str
    endpoint: str
    node: str | None


class NoOwner(Enum):
    """Why no worker can answer for a conversation."""

    LOADING = "loading"  # its model is loading (or fetching its files): llama.cpp's 503 "retry later"
    GONE = "gone"  # never seen, or its model is no longer running: llama.cpp's 404


_COMING = (ModelStatus.LOADING, ModelStatus.DOWNLOADING)


def stream_owner(state: RouterState, model: str | None, node: str | None) -> StreamOwner | NoOwner:
    """The worker to ask about a conversation remembered as served by ``model`` (None: not remembered)."""
    found = state.models.get(model) if model is not None else None
    if found is None:
        return NoOwner.GONE
    inst = found.instance
    if inst is not None and inst.status is InstanceStatus.READY:
        endpoint, at = cluster.endpoint_of(state, found, node)
        return StreamOwner(found.name, endpoint, at)
    return NoOwner.LOADING if found.status in _COMING else NoOwner.GONE


__all__ = ["NoOwner", "StreamOwner", "stream_owner"]
