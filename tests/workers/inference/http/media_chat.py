"""One chat request with media parts, for the image, audio and video tests of the worker."""

from __future__ import annotations

from typing import Any

import httpx


def media_chat(
    url: str, *parts: dict[str, Any], text: str = "describe", max_tokens: int = 6, status: int = 200, **extra: Any
) -> dict[str, Any]:
    """``/v1/chat/completions`` with a text part and ``parts``, greedy; asserts ``status``."""
    content = [{"type": "text", "text": text}, *parts]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0, **extra}
    answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == status, answer.text
    result: dict[str, Any] = answer.json()
    return result
