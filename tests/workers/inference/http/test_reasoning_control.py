"""llama-server's ``POST /v1/chat/completions/control`` on a real worker: a running chat's reasoning
ended from outside (``reasoning_control``), and the control's answers (``server-context.cpp``,
``post_control`` and its ``SERVER_TASK_TYPE_CONTROL``)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from string import ascii_lowercase
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import TOOLS_TEMPLATE, write_tiny_gguf
from tests.chat_control import (
    ENDLESS_THINKING,
    assert_control_ends_reasoning,
    assert_control_refusals,
    content_follows,
    control,
    deltas,
)


@pytest.fixture
def url(spawn_worker: Any, tmp_path: Path) -> str:
    model = write_tiny_gguf(tmp_path / "think.gguf", chat_template=TOOLS_TEMPLATE, n_ctx=256)
    return str(spawn_worker(model, "-np", "2", "-c", "256", "--context-shift").wait_ready())


@pytest.mark.timeout(120)
def test_reasoning_end_ends_the_reasoning_of_a_running_chat(url: str) -> None:
    assert_control_ends_reasoning(url, {}, {})


@pytest.mark.timeout(120)
def test_the_controls_refusals_are_llama_servers(url: str) -> None:
    assert_control_refusals(url, {}, {})
    bad = httpx.post(url + "/v1/chat/completions", json={**ENDLESS_THINKING, "reasoning_control": "yes"}, timeout=30)
    assert bad.status_code == 400 and "'reasoning_control' must be a boolean" in bad.text


@pytest.mark.timeout(120)
def test_a_grammar_that_forbids_the_tag_does_not_stop_the_ending(url: str) -> None:
    """The forced closing tag is not fed to a grammar that forbids it (llama.cpp's grammar throws, which
    would abort the worker): the chat goes on under its grammar, and the worker keeps serving."""
    body = {**ENDLESS_THINKING, "reasoning_control": True, "grammar": "root ::= [a-z]*"}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        stream = deltas(r.iter_raw())
        first = next(stream)
        assert all(set(d.get("reasoning_content") or "") <= set(ascii_lowercase) for d in islice(stream, 5))
        assert control(url, {"id": first["id"], "action": "reasoning_end"}) == {"success": True}
        assert content_follows(stream), "no content came after the reasoning was ended"
        assert all(set(d.get("content") or "") <= set(ascii_lowercase) for d in islice(stream, 20)), "the grammar's"
    assert httpx.get(url + "/health", timeout=30).status_code == 200
