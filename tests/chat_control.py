"""llama-server's ``POST /v1/chat/completions/control`` checked the same way on a worker, on a
single-model service and through the router: a chat inside its reasoning, ended from outside.

The chat opens ``<think>`` in its prompt (``devtools.tiny_gguf.TOOLS_TEMPLATE`` with ``thinking``)
and never ends by itself (no ``max_tokens``, no EOS, and the server runs with ``--context-shift``):
it runs until its client leaves, so nothing here depends on how fast the machine generates.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx

from tests.eventually import eventually

ENDLESS_THINKING = {
    "messages": [{"role": "user", "content": "think"}],
    "chat_template_kwargs": {"thinking": True},
    "max_tokens": 0,
    "ignore_eos": True,
    "stream": True,
}
NOT_FOUND = {"success": False, "message": "no active completion for this id"}  # llama-server's words


def deltas(raw: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """Each streamed chunk's delta, with the chunk's ``id`` in it (events split by hand: the random
    model's text holds characters ``str.splitlines`` takes for line ends)."""
    held = b""
    for part in raw:
        *events, held = (held + part).split(b"\n\n")
        for event in events:
            if event.startswith(b"data: {"):
                chunk = json.loads(event[6:])
                yield {**chunk["choices"][0]["delta"], "id": chunk["id"]}


def content_follows(stream: Iterator[dict[str, Any]], within: int = 100_000) -> bool:
    """Whether the answer's content comes within the next ``within`` deltas: the engine runs ahead of
    a client that reads slowly, so thousands of reasoning deltas may be on their way already."""
    return any((d.get("content") or "").strip() for d in itertools.islice(stream, within))


def control(url: str, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Any:
    """``POST {url}/v1/chat/completions/control``'s JSON answer, once its status is checked."""
    answer = httpx.post(url + "/v1/chat/completions/control", json=body, headers=headers, timeout=60)
    assert answer.status_code == status, answer.text
    return answer.json()


def assert_control_ends_reasoning(
    url: str, chat: dict[str, Any], named: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    """``chat`` (merged into :data:`ENDLESS_THINKING`) armed with ``reasoning_control`` goes on as
    reasoning until ``reasoning_end`` (sent with ``named``: a ``model``, or nothing), then the closing
    tag is forced and the answer's content follows; once its client left, the control finds nothing."""
    body = {**ENDLESS_THINKING, **chat, "reasoning_control": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200, r.read()
        stream = deltas(r.iter_raw())
        first = next(stream)
        before = [next(stream) for _ in range(20)]
        assert all(d.get("reasoning_content") and not d.get("content") for d in before), before
        ask = {**named, "id": first["id"], "action": "reasoning_end"}
        assert control(url, ask, headers=headers) == {"success": True}
        assert content_follows(stream), "no content came after the reasoning was ended"
        said = itertools.islice((d for d in stream if d.get("content") or d.get("reasoning_content")), 20)
        assert all(not d.get("reasoning_content") for d in said), "the reasoning opened again"
    # Its client left: the chat is cancelled, and then no longer found.
    eventually(lambda: control(url, ask, headers=headers) == NOT_FOUND, "the chat to end")


def assert_control_refusals(
    url: str, chat: dict[str, Any], named: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    """llama-server's refusals: 400 without an id or with another action (in that order), in its
    error shape; 200 ``success: false`` for an id nothing runs under, or a chat not armed."""
    missing = control(url, {**named, "action": "reasoning_end"}, 400, headers)
    assert missing["error"] == {"code": 400, "message": "missing completion id", "type": "invalid_request_error"}
    assert control(url, {**named, "id": "", "action": "nope"}, 400, headers)["error"]["message"] == (
        "missing completion id"
    )
    unknown = control(url, {**named, "id": "chatcmpl-x", "action": "reasoning_stop"}, 400, headers)
    assert unknown["error"] == {"code": 400, "message": "unknown control action", "type": "invalid_request_error"}
    assert control(url, {**named, "id": "chatcmpl-x"}, 400, headers)["error"]["message"] == "unknown control action"
    assert control(url, {**named, "id": "chatcmpl-x", "action": "reasoning_end"}, headers=headers) == NOT_FOUND
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json={**ENDLESS_THINKING, **chat}, headers=headers, timeout=60
    ) as r:
        stream = deltas(r.iter_raw())  # kept: a dropped generator closes the response, and the chat with it
        first = next(stream)
        answer = control(url, {**named, "id": first["id"], "action": "reasoning_end"}, headers=headers)
        assert answer == {"success": False, "message": "reasoning control not enabled for this completion"}, answer
