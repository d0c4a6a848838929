"""``--reasoning off`` as llama-server serves it (llama.cpp's ``test_template.py::test_reasoning``):
the chat template is given ``enable_thinking: false``, so the prompt ``/apply-template`` shows (the
one evaluated) ends with the template's empty thinking block. Real ``modelrouter serve`` over a tiny
GGUF, with llama.cpp's own templates (``tests/workers/inference/http/chat_templates``); every family's
table is in ``tests/workers/inference/http/test_reasoning_switch.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.workers.inference.http.test_reasoning_switch import ASK, TEMPLATES, TEST_TOOL


def _prompt(url: str, **body: Any) -> str:
    answer = httpx.post(f"{url}/apply-template", json={"messages": ASK, **body}, timeout=120)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["prompt"])


def test_reasoning_off_closes_the_thinking_block(tmp_path: Path) -> None:
    """``-m FILE --chat-template-file R1 --reasoning off``: DeepSeek R1's prompt ends ``<think>\\n</think>``
    with and without tools; a request's ``enable_thinking: true`` opens it again, and a string there
    is llama-server's 400."""
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    template = TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
    args = ["-m", str(model), "--jinja", "--chat-template-file", str(template), "--reasoning", "off"]
    with ServiceProcess(tmp_path / "home", args=args) as proc:
        for tools in (None, [], [TEST_TOOL]):
            assert _prompt(proc.url, tools=tools).endswith("<｜Assistant｜><think>\n</think>")  # noqa: RUF001
        assert _prompt(proc.url, chat_template_kwargs={"enable_thinking": True}).endswith("<think>\n")
        refused = httpx.post(
            f"{proc.url}/v1/chat/completions",
            json={"messages": ASK, "max_tokens": 1, "chat_template_kwargs": {"enable_thinking": "false"}},
            timeout=120,
        )
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["message"] == 'invalid type for "enable_thinking" (expected boolean, got string)'
        assert error["type"] == "invalid_request_error"


def test_reasoning_from_the_environment_and_presets_on_the_ggufs_template(tmp_path: Path) -> None:
    """``LLAMA_ARG_REASONING=off`` reaches a router's models (Qwen3's template, the GGUF's own, ends
    with its closed block); a preset section's ``reasoning`` wins over it, as llama.cpp's precedence
    says; under ``auto``, ``reasoning_effort: none`` (the Responses API's ``reasoning.effort``) closes it."""
    qwen3 = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    models = tmp_path / "models"
    models.mkdir()
    gguf = write_tiny_gguf(models / "qwen3.gguf", chat_template=qwen3)
    preset = tmp_path / "models.ini"
    preset.write_text(f"[thinking]\nmodel = {gguf}\nreasoning = on\n\n[auto]\nmodel = {gguf}\nreasoning = auto\n")
    args = ["--models-dir", str(models), "--models-preset", str(preset)]
    closed, opened = "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<|im_start|>assistant\n"
    with ServiceProcess(tmp_path / "home", args=args, env={"LLAMA_ARG_REASONING": "off"}) as proc:
        assert _prompt(proc.url, model="qwen3").endswith(closed)
        assert _prompt(proc.url, model="thinking").endswith(opened)
        assert _prompt(proc.url, model="auto").endswith(opened)
        assert _prompt(proc.url, model="auto", reasoning_effort="none").endswith(closed)

        def counted(model: str, **body: Any) -> int:
            url = f"{proc.url}/v1/responses/input_tokens"
            answer = httpx.post(url, json={"model": model, "input": ASK[0]["content"], **body}, timeout=120)
            assert answer.status_code == 200, answer.text
            return int(answer.json()["input_tokens"])

        assert counted("auto", reasoning={"effort": "none"}) == counted("qwen3") > counted("auto")
