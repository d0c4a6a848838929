"""A chat that continues its last message (``workers.inference.http.chat._continuation``): llama-server's
assistant prefill and ``continue_final_message``, rendered on llama.cpp's own templates (``chat_templates/``).

The expected prompts are llama-server's: the Llama 3.1 ones are llama.cpp's
``test_chat_template_assistant_prefill`` and ``test_chat_template_continue_final_message_vllm_compat``;
the others were read from the real ``llama-server`` (``make llama-server``) of the same llama.cpp,
``POST /apply-template`` with these messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workers.inference.http._errors import ApiError
from workers.inference.http.chat._parse import parse
from workers.inference.http.chat._session import chat_prompt, plan_chat
from workers.inference.http.chat._template import JinjaRenderer, Rendered, TemplateOptions

TEMPLATES = Path(__file__).parent / "chat_templates"
ASK = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
LLAMA31_END = (
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is the best book<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)
QWEN3_ASK = "<|im_start|>system\nBook<|im_end|>\n<|im_start|>user\nWhat is the best book<|im_end|>\n"


def _render(template: str, last: dict[str, Any] | None = None, **body: Any) -> Rendered:
    renderer = JinjaRenderer(
        (TEMPLATES / f"{template}.jinja").read_text(), bos="", eos="", add_bos=False, add_eos=False
    )
    messages = [*ASK, last] if last else ASK
    return chat_prompt(renderer, {"messages": messages, **body}, {})[0]


@pytest.mark.parametrize(
    ("prefill", "expected"),
    [("Whill", "Whill"), ([{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}], "Wh\n\nill")],
)
def test_a_last_assistant_message_is_continued(prefill: Any, expected: str) -> None:
    """test_chat_template_assistant_prefill: the assistant's turn is opened and its text follows,
    unclosed (text parts joined by a blank line, llama.cpp's render_content); not closed with
    ``<|eot_id|>`` and followed by a second generation prompt."""
    rendered = _render("meta-llama-Llama-3.1-8B-Instruct", {"role": "assistant", "content": prefill})
    assert rendered.prompt.endswith(LLAMA31_END + expected)
    assert rendered.prefill == expected and not rendered.quiet_prefill


def test_continue_final_message_renders_the_same_prompt() -> None:
    """test_chat_template_continue_final_message_vllm_compat: vLLM's explicit field, the same prompt;
    its stream then leaves the prefill out (``quiet_prefill``)."""
    last = {"role": "assistant", "content": "Whill"}
    asked = _render("meta-llama-Llama-3.1-8B-Instruct", last, add_generation_prompt=False, continue_final_message=True)
    assert asked.prompt == _render("meta-llama-Llama-3.1-8B-Instruct", last).prompt
    assert asked.prompt.endswith(LLAMA31_END + "Whill") and asked.quiet_prefill
    anyway = _render("meta-llama-Llama-3.1-8B-Instruct", last, continue_final_message=False)
    assert anyway.prompt == asked.prompt, "false is no request: the prefill applies"


QWEN3 = [  # (last message, continue_final_message, llama-server's prompt after the question)
    ({"role": "assistant", "content": "Whill"}, None, "<|im_start|>assistant\n<think>\n\n</think>\n\nWhill"),
    (
        {"role": "assistant", "content": "Whill", "reasoning_content": "I think"},
        None,
        "<|im_start|>assistant\n<think>\nI think\n</think>\n\nWhill",
    ),
    (
        {"role": "assistant", "content": "", "reasoning_content": "I think"},
        None,
        "<|im_start|>assistant\n<think>\nI think",
    ),
    (
        {"role": "assistant", "content": "Whill", "reasoning_content": "I think"},
        "reasoning_content",
        "<|im_start|>assistant\n<think>\nI think",
    ),
    (
        {"role": "assistant", "content": "", "reasoning_content": "I think"},
        "content",
        "<|im_start|>assistant\n<think>\nI think\n</think>\n\n",
    ),
    ({"role": "assistant", "content": ""}, None, ""),  # an empty message: no generation prompt at all
]


@pytest.mark.parametrize(("last", "asked", "tail"), QWEN3)
def test_the_reasoning_markers_of_the_template_come_first(last: dict[str, Any], asked: Any, tail: str) -> None:
    """Qwen3: the reasoning goes between the markers the template writes around an assistant's
    reasoning (closed when the content is continued), as the autoparser's generate_parser writes it."""
    body = {} if asked is None else {"continue_final_message": asked, "add_generation_prompt": False}
    assert _render("Qwen-Qwen3-0.6B", last, **body).prompt == QWEN3_ASK + tail


@pytest.mark.parametrize(
    ("template", "tail"),
    [
        ("Qwen-QwQ-32B", "<|im_start|>assistant\n<think>I think</think>Whill"),  # the old-Qwen workaround
        ("NVIDIA-Nemotron-Nano-v2", "<SPECIAL_11>Assistant\n<think>\nI think</think>Whill"),
        (
            "openai-gpt-oss-120b",
            "<|start|>assistant<|channel|>analysis<|message|>I think<|end|><|start|>assistant<|channel|>final<|message|>Whill",
        ),
        ("mistralai-Ministral-3-14B-Reasoning-2512", "[/INST][THINK]I think[/THINK]Whill"),
        ("moonshotai-Kimi-K2", "<|im_assistant|>assistant<|im_middle|><think>I think</think>Whill"),
        ("google-gemma-4-31B-it", "<|turn>model\n<|channel>thought\nI think<channel|>Whill"),
    ],
)
def test_templates_that_do_not_write_reasoning_back_use_their_handlers_tags(template: str, tail: str) -> None:
    """llama.cpp's workarounds and its families' own handlers (common/parsers/) give the markers."""
    last = {"role": "assistant", "content": "Whill", "reasoning_content": "I think"}
    assert _render(template, last).prompt.endswith(tail)


def test_the_answer_starts_with_the_prefill() -> None:
    """The reply reads the prefilled text as its beginning (llama-server parses generation prompt +
    output): the reasoning it continues is still reasoning, the content after it content."""
    renderer = JinjaRenderer(
        (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(), bos="", eos="", add_bos=False, add_eos=False
    )
    last = {"role": "assistant", "content": "", "reasoning_content": "Hmm:"}
    plan = plan_chat(renderer, {"messages": [*ASK, last]}, TemplateOptions(), "auto")
    assert plan.rendered.prompt.endswith("<think>\nHmm:") and plan.thinking
    output = plan.rendered.prefill + " more</think>\n\nThe end"
    message = parse(output, syntax=None, family=plan.family, thinking=plan.thinking)
    assert (message.reasoning_content, message.content) == ("Hmm: more", "The end")


@pytest.mark.parametrize(
    ("messages", "body", "refusal"),
    [
        (
            [*ASK, {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function"}]}],
            {},
            "Cannot continue an assistant message that contains tool calls.",
        ),
        (
            [*ASK, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
            {},
            "Cannot have 2 or more assistant messages at the end of the list.",
        ),
        (
            ASK,
            {"continue_final_message": "content"},
            "Cannot set both add_generation_prompt and continue_final_message to true.",
        ),
    ],
)
def test_what_llama_server_refuses(messages: list[dict[str, Any]], body: dict[str, Any], refusal: str) -> None:
    """A prefilled message with tool calls is refused too (the prefill is a continuation)."""
    renderer = JinjaRenderer(
        (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(), bos="", eos="", add_bos=False, add_eos=False
    )
    with pytest.raises(ApiError, match=refusal):
        chat_prompt(renderer, {"messages": messages, **body}, {})


def test_without_prefill_assistant_the_last_message_is_whole() -> None:
    """``--no-prefill-assistant`` (``prefill_assistant=False``): the last assistant message is rendered
    as a past turn, closed, and two at the end are no refusal; the explicit field still continues."""
    renderer = JinjaRenderer(
        (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(), bos="", eos="", add_bos=False, add_eos=False
    )
    twice = [*ASK, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "Whill"}]
    body = {"messages": twice, "add_generation_prompt": False}
    assert chat_prompt(renderer, body, {}, prefill_assistant=False)[0].prompt.endswith("Whill<|im_end|>\n")
    asked = {"messages": [*ASK, twice[-1]], "add_generation_prompt": False, "continue_final_message": True}
    assert chat_prompt(renderer, asked, {}, prefill_assistant=False)[0].prompt.endswith("</think>\n\nWhill")
