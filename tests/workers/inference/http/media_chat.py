"""One chat request with media parts, and a local web server for media URLs: the image, audio
and video tests of the worker."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[str]:
    """``directory`` over http on 127.0.0.1: yields the base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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
