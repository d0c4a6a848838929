"""Reasoning switched on and off, as llama-server switches it: ``--reasoning on|off`` (the server's
``enable_thinking``), a request's ``chat_template_kwargs``, ``reasoning_effort`` (``none`` is off).

The templates are llama.cpp's own (``chat_templates/``): with thinking off they write their empty
thinking block after the generation prompt (``<think>\\n</think>``, Command R7B's
``<|START_THINKING|><|END_THINKING|>``...), which is what llama.cpp's
``tools/server/tests/unit/test_template.py::test_reasoning`` reads from ``/apply-template``. Its
table is :data:`UPSTREAM`, run here with the same three ``tools`` values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workers.inference.http._errors import ApiError
from workers.inference.http._options import FrontOptions
from workers.inference.http.chat._session import chat_prompt
from workers.inference.http.chat._template import JinjaRenderer
from workers.inference.http.server._app import template_options

TEMPLATES = Path(__file__).parent / "chat_templates"
R1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"
ASK = [{"role": "user", "content": "What is today?"}]
TEST_TOOL = {  # upstream's TEST_TOOL (test_tool_call.py)
    "type": "function",
    "function": {
        "name": "test",
        "description": "",
        "parameters": {
            "type": "object",
            "properties": {"success": {"type": "boolean", "const": True}},
            "required": ["success"],
        },
    },
}
UPSTREAM = [  # test_template.py's (template, --reasoning, the prompt's expected end); None: no flag
    (R1, "on", "<think>\n"),
    (R1, "auto", "<think>\n"),
    (R1, "off", "<think>\n</think>"),
    ("Qwen-Qwen3-0.6B", "auto", "<|im_start|>assistant\n"),
    ("Qwen-Qwen3-0.6B", "off", "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    ("Qwen-QwQ-32B", "auto", "<|im_start|>assistant\n<think>\n"),
    ("Qwen-QwQ-32B", "off", "<|im_start|>assistant\n<think>\n</think>"),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "auto", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"),
    (
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
        "off",
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>",
    ),
]
# The other families we know whose llama.cpp templates read enable_thinking: their generation prompt
# with thinking on (and by default), and with it off.
OTHERS = [
    ("GLM-4.6", "<|assistant|>", "<|assistant|>\n<think></think>"),
    ("deepseek-ai-DeepSeek-V3.1", "<｜Assistant｜><think>", "<｜Assistant｜><think></think>"),  # noqa: RUF001
    ("deepseek-ai-DeepSeek-V3.2", "<｜Assistant｜><think>", "<｜Assistant｜><think></think>"),  # noqa: RUF001
    ("deepseek-ai-DeepSeek-V4", "<｜Assistant｜><think>", "<｜Assistant｜></think>"),  # noqa: RUF001
    ("google-gemma-4-31B-it", "<|turn>model\n", "<|turn>model\n<|channel>thought\n<channel|>"),
]


def _prompt(template: str, reasoning: str = "auto", **body: Any) -> str:
    """``/apply-template``'s prompt for ``body`` (``ASK`` by default), the worker started with
    ``--chat-template-file`` and ``--reasoning`` as the upstream test starts llama-server."""
    opts = template_options(FrontOptions(chat_template_file=str(TEMPLATES / f"{template}.jinja"), reasoning=reasoning))
    assert opts.template_text is not None
    renderer = JinjaRenderer(opts.template_text, bos="<s>", eos="</s>", add_bos=True, add_eos=False)
    rendered, _syntax, _grammar = chat_prompt(renderer, {"messages": ASK, **body}, opts.default_kwargs)
    return rendered.prompt


@pytest.mark.parametrize("tools", [None, [], [TEST_TOOL]], ids=["no-tools", "empty-tools", "a-tool"])
@pytest.mark.parametrize(("template", "reasoning", "end"), UPSTREAM)
def test_the_upstream_reasoning_table(template: str, reasoning: str, end: str, tools: list[Any] | None) -> None:
    """Each of llama.cpp's cases: off ends with the empty thinking block, on and auto as before."""
    assert _prompt(template, reasoning, tools=tools).endswith(end)


@pytest.mark.parametrize(("template", "on", "off"), OTHERS)
def test_the_other_families_switch_off_too(template: str, on: str, off: str) -> None:
    """``--reasoning on`` renders what no flag renders; ``off`` closes the family's own block."""
    default = _prompt(template)
    assert default.endswith(on) and _prompt(template, "on") == default
    assert _prompt(template, "off").endswith(off)


def test_a_request_overrides_the_server_and_a_string_is_refused() -> None:
    """A request's ``enable_thinking`` wins over ``--reasoning`` either way; a string in its place is
    llama-server's 400 (``oaicompat_chat_params_parse``), whichever side gave it."""
    assert _prompt(R1, "off", chat_template_kwargs={"enable_thinking": True}).endswith("<think>\n")
    assert _prompt(R1, "on", chat_template_kwargs={"enable_thinking": False}).endswith("<think>\n</think>")
    assert _prompt(R1, chat_template_kwargs={"enable_thinking": False}).endswith("<think>\n</think>")
    with pytest.raises(ApiError) as refused:
        _prompt(R1, chat_template_kwargs={"enable_thinking": "false"})
    assert refused.value.status == 400
    assert refused.value.message == 'invalid type for "enable_thinking" (expected boolean, got string)'


def test_reasoning_effort_none_is_off_unless_a_kwarg_says_otherwise() -> None:
    """``reasoning_effort: none`` lowers the default of ``enable_thinking`` only: the server's
    ``--reasoning on`` and a request's kwarg lie above it, as in llama-server."""
    assert _prompt(R1, reasoning_effort="none").endswith("<think>\n</think>")
    assert _prompt(R1, "on", reasoning_effort="none").endswith("<think>\n")
    assert _prompt(R1, reasoning_effort="none", chat_template_kwargs={"enable_thinking": True}).endswith("<think>\n")
    assert _prompt(R1, reasoning_effort="high").endswith("<think>\n")


def test_reasoning_effort_reaches_the_template(tmp_path: Path) -> None:
    """Any other effort is the template's ``reasoning_effort`` (over a kwarg's); ``none`` takes it away."""
    template = tmp_path / "effort.jinja"
    template.write_text("{{ reasoning_effort | default('unset') }}/{{ enable_thinking }}")
    opts = template_options(FrontOptions(chat_template_file=str(template)))
    assert opts.template_text is not None
    renderer = JinjaRenderer(opts.template_text, bos="", eos="", add_bos=False, add_eos=False)

    def render(**body: Any) -> str:
        return chat_prompt(renderer, {"messages": ASK, **body}, {})[0].prompt

    assert render() == "unset/True"
    assert render(reasoning_effort="low", chat_template_kwargs={"reasoning_effort": "high"}) == "low/True"
    assert render(reasoning_effort="none", chat_template_kwargs={"reasoning_effort": "high"}) == "unset/False"
