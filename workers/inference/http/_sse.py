"""A named server-sent event (``event: NAME`` + ``data: JSON``), as Anthropic's and OpenAI's
Responses streams send them; plain dicts stream as ``data:`` lines only (OpenAI chat)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.inference.http._wire import json_bytes


@dataclass(frozen=True)
class SseEvent:
    name: str
    data: dict[str, Any]  # Any: the event's JSON values


def sse_bytes(item: Any) -> bytes:
    """One server-sent event: a named one (``SseEvent``) as ``event:`` + ``data:``, else ``data:`` alone."""
    if isinstance(item, SseEvent):
        return b"event: " + item.name.encode() + b"\ndata: " + json_bytes(item.data) + b"\n\n"
    return b"data: " + json_bytes(item) + b"\n\n"
