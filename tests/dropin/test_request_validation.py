"""Request validation as llama-server does it (issue 32, group 5), in single-model mode
(``modelrouter serve -m FILE --jinja``) on a tiny real GGUF with a ChatML-style template.

Expectations are llama.cpp's ``oaicompat_chat_params_parse`` (``tools/server/server-common.cpp``),
``tokenize_input_prompts`` and its ``tests/unit/test_chat_completion.py``, ``test_compat_anthropic.py``
and ``test_completion.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf

CTX = 512
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("validation")
    write_tiny_gguf(root / "chat.gguf", chat_template=None, n_ctx=CTX)  # ChatML, llama-server's fallback
    args = ["-m", str(root / "chat.gguf"), "--jinja", "-c", str(CTX), "-np", "2"]
    proc = ServiceProcess(root / "home", args=args).start(timeout=120)  # /health: the model is loaded
    yield proc.url
    proc.stop()


def _post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=120)


def _refusal(answer: httpx.Response) -> str:
    assert answer.status_code == 400, answer.text
    message: str = answer.json()["error"]["message"]
    return message


HELLO = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/apply-template"])
def test_continue_final_message_with_add_generation_prompt_is_refused(url: str, path: str) -> None:
    """test_chat_template_continue_final_message_mutual_exclusion: both true is a 400, and so is
    continue_final_message alone (add_generation_prompt is true unless the client says false)."""
    for extra in ({"add_generation_prompt": True}, {}):
        body = {"max_tokens": 2, "messages": HELLO, "continue_final_message": True, **extra}
        message = _refusal(_post(url, path, body))
        assert message == "Cannot set both add_generation_prompt and continue_final_message to true."
    body = {"messages": HELLO, "continue_final_message": True, "add_generation_prompt": False}
    assert _post(url, "/apply-template", body).status_code == 200


def test_two_assistant_messages_at_the_end_are_refused(url: str) -> None:
    """test_invalid_chat_completion_req[messages7] (llama-server's default --prefill-assistant)."""
    messages = [{"role": "user", "content": "test"}, *[{"role": "assistant", "content": "test"}] * 2]
    message = _refusal(_post(url, "/v1/chat/completions", {"messages": messages}))
    assert message == "Cannot have 2 or more assistant messages at the end of the list."


def test_anthropic_empty_messages_are_a_chat(url: str) -> None:
    """test_anthropic_empty_messages: llama-server renders the template's bare generation prompt."""
    answer = _post(url, "/v1/messages", {"model": "test", "max_tokens": 4, "messages": []})
    assert answer.status_code == 200, answer.text
    assert answer.json()["type"] == "message"
    counted = _post(url, "/v1/messages/count_tokens", {"model": "test", "messages": []})
    assert counted.status_code == 200, counted.text
    prompt = _post(url, "/apply-template", {"messages": [{"role": "user", "content": ""}]})
    assert prompt.status_code == 200, prompt.text
    assert 0 < counted.json()["input_tokens"] < len(prompt.json()["prompt"])  # the generation prompt alone


PROMPT = "I believe the meaning of life is"


def test_token_and_batch_prompts_are_served(url: str) -> None:
    """test_completion_with_tokens_input: token ids, several prompts (an array per prompt, strings
    and objects mixed in) and strings mixed with ids in one prompt, as llama-server serves them."""
    tokens = _post(url, "/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    base = {"n_predict": 4, "temperature": 0}
    single = _post(url, "/completion", {**base, "prompt": tokens})
    assert single.status_code == 200, single.text
    assert isinstance(single.json()["content"], str)
    for batch in ([tokens, tokens], [tokens, PROMPT], [tokens, {"prompt_string": PROMPT}]):
        answer = _post(url, "/completion", {**base, "prompt": batch})
        assert answer.status_code == 200, answer.text
        results = answer.json()
        assert isinstance(results, list) and len(results) == 2
        assert results[0]["content"] == results[1]["content"] == single.json()["content"]
        assert [r["index"] for r in results] == [0, 1]
    mixed = _post(url, "/completion", {**base, "prompt": [1, 2, 3, 4, 5, 6, PROMPT, 7, 8, 9, 10, PROMPT]})
    assert mixed.status_code == 200, mixed.text
    assert isinstance(mixed.json()["content"], str)


def test_several_prompts_in_openai_and_streamed_shapes(url: str) -> None:
    """OpenAI's /v1/completions gets one choice per prompt; a stream interleaves both, each with its index."""
    body = {"max_tokens": 3, "temperature": 0, "prompt": [PROMPT, "once upon"]}
    answer = _post(url, "/v1/completions", body)
    assert answer.status_code == 200, answer.text
    choices = answer.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    usage = answer.json()["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    with httpx.stream("POST", f"{url}/completion", json={**body, "stream": True}, timeout=120) as streamed:
        assert streamed.status_code == 200
        lines = [line.removeprefix("data: ") for line in streamed.iter_lines() if line.startswith("data: ")]
    indexes = {json.loads(line)["index"] for line in lines if line != "[DONE]"}
    assert indexes == {0, 1}


def test_prompt_refusals(url: str) -> None:
    """An empty prompt list is llama-server's 400; n_cmpl above 1 takes one prompt (a documented difference)."""
    assert _refusal(_post(url, "/completion", {"prompt": []})) == '"prompt" must not be empty'
    message = _refusal(_post(url, "/completion", {"prompt": ["a", "b"], "n_cmpl": 2}))
    assert message == "'n_cmpl' (or 'n') above 1 takes one prompt (send one request per prompt)"
