"""llama-server's assistant prefill and ``continue_final_message``, served: ``modelrouter serve -m FILE
--jinja`` as llama.cpp's ``test_chat_template_assistant_prefill`` and
``test_chat_template_continue_final_message_vllm_compat`` start it (``--chat-template-file`` the
Llama 3.1 template, ``-v`` for ``__verbose``), and a real decode on a tiny model that answers ``<R>``
after a newline, whatever came before (``devtools.tiny_gguf``'s ``reply``): its template's
generation prompt ends without one, so only a prompt that ends with the prefilled ``Sure:\\n`` gets
``<R>``. What the answers hold is what the real llama-server answered to the same requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.dropin.http_calls import post_ok, streamed_objects

TEMPLATES = Path(__file__).parents[1] / "workers" / "inference" / "http" / "chat_templates"
ASK = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
LLAMA31_END = (
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is the best book<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)
# ChatML whose generation prompt ends without a newline: the tiny model answers <R> after one only.
NO_NEWLINE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{% endif %}"
)
SURE = [{"role": "user", "content": "Well?"}, {"role": "assistant", "content": "Sure:\n"}]
pytestmark = pytest.mark.timeout(240)


def _serve(root: Path, *args: str) -> ServiceProcess:
    return ServiceProcess(root / "home", args=[*args, "-c", "512", "-np", "1"]).start(timeout=120)


@pytest.fixture(scope="module")
def llama31(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("llama31")
    write_tiny_gguf(root / "tiny.gguf", n_ctx=512)
    template = str(TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja")
    proc = _serve(root, "-m", str(root / "tiny.gguf"), "--jinja", "--chat-template-file", template, "-v")
    yield proc.url
    proc.stop()


@pytest.fixture(scope="module")
def replying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("replying")
    write_tiny_gguf(root / "reply.gguf", n_ctx=512, reply="<R>", chat_template=NO_NEWLINE)
    proc = _serve(root, "-m", str(root / "reply.gguf"), "--jinja")
    yield proc.url
    proc.stop()


def _post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return post_ok(url, path, body)


def _events(url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    return streamed_objects(url, path, body)


@pytest.mark.parametrize(
    ("prefill", "expected"),
    [("Whill", "Whill"), ([{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}], "Wh\n\nill")],
)
def test_chat_template_assistant_prefill(llama31: str, prefill: Any, expected: str) -> None:
    """Upstream's test: the evaluated prompt (``__verbose``) ends inside the assistant's open turn;
    ``/apply-template`` shows that prompt."""
    body = {"max_tokens": 8, "messages": [*ASK, {"role": "assistant", "content": prefill}]}
    answer = _post(llama31, "/chat/completions", body)
    assert answer["__verbose"]["prompt"].endswith(LLAMA31_END + expected)
    assert _post(llama31, "/apply-template", body)["prompt"].endswith(LLAMA31_END + expected)


def test_chat_template_continue_final_message_vllm_compat(llama31: str) -> None:
    """Upstream's test: vLLM's explicit field renders the same prompt."""
    last = {"role": "assistant", "content": "Whill"}
    body = {"max_tokens": 8, "add_generation_prompt": False, "continue_final_message": True, "messages": [*ASK, last]}
    answer = _post(llama31, "/chat/completions", body)
    assert answer["__verbose"]["prompt"].endswith(LLAMA31_END + "Whill")


def test_the_reply_continues_the_prefilled_text(replying: str) -> None:
    """The model goes on from the prefill (``<R>`` follows its newline, then the end of turn); the
    answer's content is the prefill and the continuation, ``__verbose``'s the generated text only;
    streamed, the prefill comes in the first delta, except under ``continue_final_message``."""
    body = {"messages": SURE, "max_tokens": 4, "temperature": 0, "verbose": True}
    answer = _post(replying, "/v1/chat/completions", body)
    assert answer["choices"][0]["message"]["content"] == "Sure:\n<R>"
    assert answer["choices"][0]["finish_reason"] == "stop" and answer["__verbose"]["content"] == "<R>"
    deltas = [c["choices"][0]["delta"].get("content") for c in _events(replying, "/v1/chat/completions", body)]
    assert "".join(d for d in deltas if d) == "Sure:\n<R>"
    asked = {**body, "continue_final_message": True, "add_generation_prompt": False}
    assert _post(replying, "/v1/chat/completions", asked)["choices"][0]["message"]["content"] == "Sure:\n<R>"
    deltas = [c["choices"][0]["delta"].get("content") for c in _events(replying, "/v1/chat/completions", asked)]
    assert "".join(d for d in deltas if d) == "<R>"


def test_anthropic_assistant_prefill_continues(replying: str) -> None:
    """Anthropic's prefill (a last assistant turn): llama-server converts the request to a chat and
    continues it the same way; the text block is the prefill and the continuation, streamed too."""
    body = {"model": "any", "max_tokens": 4, "temperature": 0, "messages": SURE}
    reply = _post(replying, "/v1/messages", body)
    assert reply["content"] == [{"type": "text", "text": "Sure:\n<R>"}] and reply["stop_reason"] == "end_turn"
    texts = [
        e["delta"]["text"] for e in _events(replying, "/v1/messages", body) if e.get("type") == "content_block_delta"
    ]
    assert "".join(texts) == "Sure:\n<R>"


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--no-prefill-assistant"], {}), ([], {"LLAMA_ARG_NO_PREFILL_ASSISTANT": "1"})],
    ids=["flag", "env"],
)
def test_no_prefill_assistant_renders_the_last_assistant_message_as_a_whole_turn(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """llama-server's ``--no-prefill-assistant`` (``server-common.cpp``: no automatic continuation): a
    last assistant message is a closed turn and the generation prompt follows; asked for explicitly
    (``continue_final_message``), it is still continued. Without the flag, ``llama31`` above."""
    write_tiny_gguf(tmp_path / "tiny.gguf", n_ctx=512)
    template = str(TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja")
    argv = ["-m", str(tmp_path / "tiny.gguf"), "--jinja", "--chat-template-file", template, *args, "-c", "512"]
    with ServiceProcess(tmp_path / "home", args=argv, env=env) as proc:
        body = {"messages": [*ASK, {"role": "assistant", "content": "Whill"}]}
        closed = "Whill<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        assert _post(proc.url, "/apply-template", body)["prompt"].endswith(LLAMA31_END + closed)
        asked = {**body, "continue_final_message": True, "add_generation_prompt": False}
        assert _post(proc.url, "/apply-template", asked)["prompt"].endswith(LLAMA31_END + "Whill")


def test_a_preset_sections_prefill_assistant_false_closes_its_models_turns(tmp_path: Path) -> None:
    """Router mode: a preset section's ``prefill-assistant = false`` reaches that model only."""
    models = tmp_path / "models"
    models.mkdir()
    template = (TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()
    gguf = write_tiny_gguf(models / "llama31.gguf", n_ctx=512, chat_template=template)
    preset = tmp_path / "models.ini"
    preset.write_text(f"[closed]\nmodel = {gguf}\nprefill-assistant = false\n\n[open]\nmodel = {gguf}\n")
    args = ["--models-dir", str(models), "--models-preset", str(preset), "--jinja"]
    with ServiceProcess(tmp_path / "home", args=args) as proc:
        messages = [*ASK, {"role": "assistant", "content": "Whill"}]
        closed = _post(proc.url, "/apply-template", {"model": "closed", "messages": messages})["prompt"]
        assert closed.endswith(LLAMA31_END + "Whill<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
        opened = _post(proc.url, "/apply-template", {"model": "open", "messages": messages})["prompt"]
        assert opened.endswith(LLAMA31_END + "Whill")
