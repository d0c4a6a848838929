"""Malformed chat messages are 400 at the worker itself, and it keeps serving (issue 11 §1.5).

Before the fix, ``[{"role": "user"}]`` answered 500 "inference failed: 'content'"
and ``[{"role": {}}]`` dropped the connection (an unhashable role).
"""

from __future__ import annotations

import httpx
import pytest

from tests.workers.conftest import WorkerProc

BAD_MESSAGES = [
    [{"role": "user"}],
    [{"role": {}}],
    [{"role": ["user"]}],
    [{"role": None, "content": "hi"}],
    [{"role": "system"}],
    [{"role": "tool"}],
    [{"role": "user", "content": 5}],
    [{"role": "user", "content": [{"type": "text"}]}],
    ["hello"],
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("messages", BAD_MESSAGES, ids=[str(m)[:40] for m in BAD_MESSAGES])
def test_malformed_messages_are_400_and_the_worker_survives(ready_worker: WorkerProc, messages: list[object]) -> None:
    with httpx.Client(base_url=ready_worker.endpoint, timeout=30) as c:
        answer = c.post("/v1/chat/completions", json={"model": "tiny", "messages": messages, "max_tokens": 2})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["type"] == "invalid_request_error"
        assert c.get("/health").json() == {"status": "ok"}


@pytest.mark.timeout(60)
def test_an_assistant_turn_without_content_is_served(ready_worker: WorkerProc) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant"}, {"role": "user", "content": "again"}]
    with httpx.Client(base_url=ready_worker.endpoint, timeout=30) as c:
        answer = c.post("/v1/chat/completions", json={"model": "tiny", "messages": messages, "max_tokens": 2})
        assert answer.status_code == 200, answer.text
