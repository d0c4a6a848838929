"""Forwarding a request to the node whose worker serves the model (workers stay on loopback).

The proxy sends a request for a model loaded on another node to that node's
service URL (its ``node_joined`` ``url``) with the same path, body and
streaming; that node serves it as one of its own. The caller's API key goes
along: every node of a cluster is configured with the same keys. So does the caller's name
(``X-Modelrouter-Caller``, issue 34), which the serving node records as ``request_completed``'s
``key``; it trusts the name only on a hop made with a full key (``service.api.auth``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_CREDENTIALS = ("authorization", "x-api-key")
CALLER_HEADER = "x-modelrouter-caller"


def forward_headers(
    incoming: Mapping[str, str], kept: Sequence[str], node: str | None, caller: str | None = None
) -> dict[str, str]:
    """The ``kept`` headers of ``incoming``, and its credentials for a request forwarded to ``node``
    (None: a local worker, which takes no key), with the ``caller``'s name (never the client's own
    ``X-Modelrouter-Caller``: only this node's word is passed on)."""
    names = (*kept, *_CREDENTIALS) if node is not None else kept
    headers = {k: v for k, v in incoming.items() if k.lower() in names and k.lower() != CALLER_HEADER}
    if node is not None and caller is not None:
        headers[CALLER_HEADER] = caller
    return headers
