"""Plain calls to a served API, for tests that read whole answers and streamed ``data:`` objects."""

from __future__ import annotations

import json
from typing import Any

import httpx


def post_ok(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body``; the answer must be 200, its JSON object is returned."""
    answer = httpx.post(f"{base_url}{path}", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    out: dict[str, Any] = answer.json()
    return out


def streamed_objects(base_url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST ``body`` streamed; the answer must be 200, its ``data:`` JSON objects are returned in order."""
    with httpx.stream("POST", f"{base_url}{path}", json={**body, "stream": True}, timeout=120) as answer:
        assert answer.status_code == 200, answer.read()
        return [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: {")]
