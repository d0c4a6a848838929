"""A named server-sent event (``event: NAME`` + ``data: JSON``), as Anthropic's and OpenAI's
Responses streams send them; plain dicts stream as ``data:`` lines only (OpenAI chat)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    name: str
    data: dict[str, object]  # the event's JSON object, written as it is
