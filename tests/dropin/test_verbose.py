"""llama-server's ``__verbose``: with ``-v`` (``verbosity > 9``), or when a request asks with
``"verbose": true``, OpenAI's chat and completion answers carry the native ``/completion`` result
(``server-task.cpp``), whose ``prompt`` is the evaluated prompt as text, special tokens and all: what
llama.cpp's ``test_chat_template*`` read back, and ``test_verbose_debug`` asks per request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from devtools.service_process import ServiceProcess
from tests.dropin.conftest import Serve
from tests.dropin.http_calls import post_ok, streamed_objects
from tests.service_probes import wait_for_event

# server_task_result_cmpl_final::to_json_non_oaicompat
NATIVE_FINAL = {
    "index",
    "content",
    "tokens",
    "id_slot",
    "stop",
    "model",
    "tokens_predicted",
    "tokens_evaluated",
    "generation_settings",
    "prompt",
    "has_new_line",
    "truncated",
    "stop_type",
    "stopping_word",
    "tokens_cached",
    "timings",
}
CHAT: dict[str, Any] = {
    "messages": [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}],
    "max_tokens": 4,
    "temperature": 0,
}
pytestmark = pytest.mark.timeout(240)


def _post(svc: ServiceProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return post_ok(svc.url, path, body)


def _events(svc: ServiceProcess, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    return streamed_objects(svc.url, path, body)


def _evaluated_prompt(svc: ServiceProcess, body: dict[str, Any]) -> str:
    """The chat's prompt as llama-server evaluates it, read back as text: the template's rendering,
    tokenized with the BOS token and the template's special tokens, detokenized with them."""
    rendered = _post(svc, "/apply-template", body)["prompt"]
    tokens = _post(svc, "/tokenize", {"content": rendered, "add_special": True})["tokens"]
    return str(_post(svc, "/detokenize", {"tokens": tokens})["content"])


@pytest.mark.timeout(300)
def test_verbose_flag_puts_the_native_result_in_openai_answers(serve: Serve, models_dir: Path) -> None:
    """``-m tiny-a.gguf -v``: a chat and a completion carry ``__verbose`` (the native final result,
    the evaluated prompt as its ``prompt``), before ``timings``; streamed, every completion chunk
    carries its own and a chat's finishing chunk the final one; a request's ``"verbose": false``
    turns it off; Anthropic's and the native answers never carry it."""
    svc = serve("-m", str(models_dir / "tiny-a.gguf"), "-v")
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)
    chat = _post(svc, "/v1/chat/completions", CHAT)
    assert list(chat)[-2:] == ["__verbose", "timings"]
    verbose = chat["__verbose"]
    assert set(verbose) == NATIVE_FINAL and verbose["stop"] is True and verbose["model"] == "tiny-a"
    assert verbose["prompt"] == _evaluated_prompt(svc, CHAT) and "Book" in verbose["prompt"]
    assert verbose["content"] == chat["choices"][0]["message"]["content"]
    assert verbose["tokens_evaluated"] == chat["usage"]["prompt_tokens"]
    assert verbose["tokens_predicted"] == chat["usage"]["completion_tokens"]
    assert "__verbose" not in _post(svc, "/v1/chat/completions", {**CHAT, "verbose": False})

    completion = _post(svc, "/v1/completions", {"prompt": "once upon", "max_tokens": 3})
    assert set(completion["__verbose"]) == NATIVE_FINAL
    assert completion["__verbose"]["content"] == completion["choices"][0]["text"]

    chunks = _events(svc, "/v1/completions", {"prompt": "once upon", "max_tokens": 3})
    assert all("__verbose" in c for c in chunks) and [c["__verbose"]["stop"] for c in chunks][-1] is True
    assert all(c["__verbose"]["content"] == c["choices"][0]["text"] for c in chunks[:-1])
    assert chunks[-1]["__verbose"]["content"] == "", "streamed, the final result's content is in the chunks"
    deltas = _events(svc, "/v1/chat/completions", CHAT)
    carrying = [d for d in deltas if "__verbose" in d]
    assert len(carrying) == 1 and carrying[0]["choices"][0]["finish_reason"] is not None
    assert carrying[0]["__verbose"]["prompt"] == verbose["prompt"]

    native = _post(svc, "/completion", {"prompt": "once upon", "n_predict": 2})
    assert "__verbose" not in native
    messages = anthropic.Anthropic(base_url=svc.url, api_key="unused", max_retries=0)
    reply = messages.messages.create(model="any", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert "__verbose" not in reply.model_dump()


def test_without_the_flag_only_a_request_that_asks_gets_it(serve: Serve, models_dir: Path) -> None:
    """llama.cpp's ``test_verbose_debug``: no ``-v``, no ``__verbose``; ``"verbose": true`` asks for
    it on that request; anything but a boolean is a 400."""
    svc = serve("-m", str(models_dir / "tiny-a.gguf"))
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)
    assert "__verbose" not in _post(svc, "/v1/chat/completions", CHAT)
    assert "__verbose" not in _post(svc, "/v1/completions", {"prompt": "once upon", "max_tokens": 2})
    asked = _post(svc, "/v1/chat/completions", {**CHAT, "verbose": True})
    assert "Book" in asked["__verbose"]["prompt"]
    refused = httpx.post(f"{svc.url}/v1/chat/completions", json={**CHAT, "verbose": "yes"}, timeout=120)
    assert refused.status_code == 400


def test_in_router_mode_verbose_is_each_models_option(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    """A preset's ``verbose`` (as llama.cpp's router passes a section's options to that child): the
    model it names answers with ``__verbose``, the others without."""
    preset = tmp_path / "presets.ini"
    preset.write_text(f"[tiny-a]\nmodel = {models_dir / 'tiny-a.gguf'}\nverbose = true\n")
    svc = serve("--models-dir", str(models_dir), "--models-preset", str(preset))
    assert "__verbose" in _post(svc, "/v1/chat/completions", {**CHAT, "model": "tiny-a"})
    assert "__verbose" not in _post(svc, "/v1/chat/completions", {**CHAT, "model": "tiny-b"})
