"""Forwarding a request to the node whose worker serves the model (workers stay on loopback).

The proxy sends a request for a model loaded on another node to that node's
service URL (its ``node_joined`` ``url``) with the same path, body and
streaming; that node serves it as one of its own. The caller's API key goes
along: every node of a cluster is configured with the same keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_CREDENTIALS = ("authorization", "x-api-key")


def forward_headers(incoming: Mapping[str, str], kept: Sequence[str], node: str | None) -> dict[str, str]:
    """The ``kept`` headers of ``incoming``, and its credentials for a request forwarded to ``node``
    (None: a local worker, which takes no key)."""
    names = (*kept, *_CREDENTIALS) if node is not None else kept
    return {k: v for k, v in incoming.items() if k.lower() in names}
