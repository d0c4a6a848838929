"""llama-server's ``POST /v1/chat/completions/control`` on a real worker: a running chat's reasoning
ended from outside (``reasoning_control``), and the control's answers (``server-context.cpp``,
``post_control`` and its ``SERVER_TASK_TYPE_CONTROL``)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import TOOLS_TEMPLATE, write_tiny_gguf
from tests.eventually import eventually

# An endless chat (no max_tokens, no EOS, a full context shifts) that opens <think> in its prompt: it
# runs until its client leaves, so what follows cannot depend on how fast the machine generates.
THINKING = {"messages": [{"role": "user", "content": "think"}], "chat_template_kwargs": {"thinking": True},
            "max_tokens": 0, "ignore_eos": True, "stream": True}  # fmt: skip


@pytest.fixture
def url(spawn_worker: Any, tmp_path: Path) -> str:
    model = write_tiny_gguf(tmp_path / "think.gguf", chat_template=TOOLS_TEMPLATE, n_ctx=256)
    return str(spawn_worker(model, "-np", "2", "-c", "256", "--context-shift").wait_ready())


def _deltas(raw: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """Each chunk's delta, with the chunk's ``id`` in it (events split by hand: the random model's
    text holds characters ``str.splitlines`` takes for line ends)."""
    held = b""
    for part in raw:
        *events, held = (held + part).split(b"\n\n")
        for event in events:
            if event.startswith(b"data: {"):
                chunk = json.loads(event[6:])
                yield {**chunk["choices"][0]["delta"], "id": chunk["id"]}


def _control(url: str, body: Any, status: int = 200) -> Any:
    answer = httpx.post(url + "/v1/chat/completions/control", json=body, timeout=30)
    assert answer.status_code == status, answer.text
    return answer.json()


@pytest.mark.timeout(120)
def test_reasoning_end_ends_the_reasoning_of_a_running_chat(url: str) -> None:
    """Armed with ``reasoning_control``, a chat inside its reasoning goes on as reasoning until the
    control; then the closing tag is forced, and what follows is the answer's content."""
    with httpx.stream("POST", url + "/v1/chat/completions", json={**THINKING, "reasoning_control": True},
                      timeout=60) as r:  # fmt: skip
        assert r.status_code == 200
        deltas = _deltas(r.iter_raw())
        first = next(deltas)
        before = [next(deltas) for _ in range(20)]
        assert all(d.get("reasoning_content") and not d.get("content") for d in before), before
        assert _control(url, {"id": first["id"], "action": "reasoning_end"}) == {"success": True}
        after = []
        for d in deltas:
            after.append(d)
            if len(after) > 400 or (d.get("content") or "").strip():
                break
        assert (after[-1].get("content") or "").strip(), "no content came after the reasoning was ended"
        answered = list(itertools.islice((d for d in deltas if d.get("content") or d.get("reasoning_content")), 20))
        assert all(not d.get("reasoning_content") for d in answered), "the reasoning opened again"
    # Its client left: the completion is cancelled, and then no longer found.
    gone = {"success": False, "message": "no active completion for this id"}
    eventually(lambda: _control(url, {"id": first["id"], "action": "reasoning_end"}) == gone, "the chat to end")


@pytest.mark.timeout(120)
def test_the_controls_refusals_are_llama_servers(url: str) -> None:
    """400 without an id or with another action (checked in that order); 200 ``success: false`` with
    llama-server's reason for an id nothing runs under, or a chat sent without ``reasoning_control``."""
    missing = _control(url, {"action": "reasoning_end"}, 400)
    assert missing["error"] == {"code": 400, "message": "missing completion id", "type": "invalid_request_error"}
    assert _control(url, {"id": "", "action": "nope"}, 400)["error"]["message"] == "missing completion id"
    unknown = _control(url, {"id": "chatcmpl-x", "action": "reasoning_stop"}, 400)
    assert unknown["error"] == {"code": 400, "message": "unknown control action", "type": "invalid_request_error"}
    assert _control(url, {"id": "chatcmpl-x"}, 400)["error"]["message"] == "unknown control action"
    assert _control(url, {"id": "chatcmpl-x", "action": "reasoning_end"}) == {
        "success": False, "message": "no active completion for this id"}  # fmt: skip
    with httpx.stream("POST", url + "/v1/chat/completions", json=THINKING, timeout=60) as r:
        first = next(_deltas(r.iter_raw()))
        assert _control(url, {"id": first["id"], "action": "reasoning_end"}) == {
            "success": False, "message": "reasoning control not enabled for this completion"}  # fmt: skip
    bad = httpx.post(url + "/v1/chat/completions", json={**THINKING, "reasoning_control": "yes"}, timeout=30)
    assert bad.status_code == 400 and "'reasoning_control' must be a boolean" in bad.text
