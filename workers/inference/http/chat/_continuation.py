"""A chat that continues its last message: llama-server's assistant prefill and ``continue_final_message``.

When a chat ends with an assistant message (llama-server's default ``--prefill-assistant``), or the
client asks with ``continue_final_message`` (vLLM's and Transformers' field: ``true``, ``"content"``
or ``"reasoning_content"``, with ``add_generation_prompt: false``), llama-server
(``oaicompat_chat_params_parse``, ``common_chat_templates_apply_jinja``, the autoparser's
``generate_parser``) renders every message but the last without a generation prompt, then the
generation prompt (the difference a generation prompt makes to that rendering), then the last
message: its text (text parts joined by a blank line, ``render_content``), after the template's
reasoning markers where it has them (the reasoning, closed when the content is continued). A
message with nothing in it leaves the prompt without a generation prompt at all, as there.

The answer reads the prefilled text as its beginning: the reply's ``content`` (or
``reasoning_content``) is the prefill and what the model added. Streamed, the prefill comes in the
first delta, except when ``continue_final_message`` was asked (``task_result_state``: the parser
starts from it). ``--no-jinja`` (llama.cpp's built-in templates) renders the whole chat closed,
as llama-server's legacy path does.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workers.inference.http._errors import ApiError
from workers.inference.http._json import Json, JsonObject
from workers.inference.http.chat._formats import FAMILIES, THINK, family_of
from workers.inference.http.chat._template import LegacyRenderer, Message, Rendered

CONTENT, REASONING = "content", "reasoning_content"
# The autoparser's probes (chat-diff-analyzer.cpp), so a template's markers are found where it finds them.
_USER = {"role": "user", "content": "U_USER_MSG Hello END_U"}
_ANSWER = "A_ASST_MSG I can help END_A"
_THOUGHT = "REASON_PART I am thinking END_R"
_MARKER = r"(?:<[^>]*>|\[[^\]]*\])"  # the autoparser's marker(): <...> or [...]
_WRAPPED = re.compile(rf"({_MARKER}\s*){re.escape(_THOUGHT)}(\s*{_MARKER}\s*)")
# The families whose llama.cpp handler continues with its own tags, whatever the template writes.
_HANDLED = {
    "gpt-oss": ("<|channel|>analysis<|message|>", "<|end|><|start|>assistant<|channel|>final<|message|>"),
    "gemma4": ("<|channel>thought\n", "<channel|>"),
    "kimi-k2": THINK,
    "lfm2": THINK,
}


@dataclass(frozen=True)
class Continuation:
    """The message a chat continues, and how."""

    message: Message
    mode: str  # CONTENT or REASONING: what the model goes on writing
    asked: bool  # the client's continue_final_message (not the prefill): its stream leaves the prefill out


def _field(value: Json) -> str | None:
    """``common_chat_continuation_parse``: true is automatic (""), the two names are themselves."""
    if value is True:
        return ""
    return str(value) if value in (CONTENT, REASONING) else None


def continuation(
    messages: Sequence[Message], add_generation_prompt: bool, asked: Json, *, prefill_assistant: bool = True
) -> Continuation | None:
    """The chat's continuation, or None; refused (400, llama-server's words) as ``oaicompat_chat_params_parse``
    refuses them: ``continue_final_message`` with ``add_generation_prompt`` (true by default), two
    assistant messages at the end, or a continued message with tool calls. ``prefill_assistant``:
    llama-server's ``--prefill-assistant`` (its default; off, a last assistant message is a whole one)."""
    mode = _field(asked)
    last = messages[-1] if messages else None
    roles = [m.get("role") for m in messages[-2:]]
    if mode is None and prefill_assistant and last is not None and last.get("role") == "assistant":
        if roles == ["assistant", "assistant"]:
            raise ApiError(400, "Cannot have 2 or more assistant messages at the end of the list.")
        mode, add_generation_prompt = "", False
    if mode is None:
        return None
    if add_generation_prompt:
        raise ApiError(400, "Cannot set both add_generation_prompt and continue_final_message to true.")
    if last is not None and last.get("role") == "assistant" and last.get("tool_calls"):
        raise ApiError(400, "Cannot continue an assistant message that contains tool calls.")
    if last is None:
        return None  # nothing to continue: the bare template, without a generation prompt
    if not mode:  # automatic: the reasoning when that is all the message has
        reasoning_only = last.get(REASONING) and not _content(last)
        mode = REASONING if reasoning_only else CONTENT
    return Continuation(last, mode, asked=_field(asked) is not None)


def _content(msg: Message) -> str:
    content = msg.get("content")
    if isinstance(content, list):  # render_content: text parts, a blank line between
        return "\n\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""


def _render(renderer: Any, messages: Sequence[Message], tools: Any, kwargs: JsonObject, prompt: bool) -> str:
    return str(renderer.render(messages, tools=tools, add_generation_prompt=prompt, kwargs=kwargs).prompt)


@functools.lru_cache(maxsize=16)
def reasoning_markers(renderer: Any) -> tuple[str, str]:
    """``(start, end)`` of the template's reasoning, ``("", "")`` without: where the autoparser finds
    them (``compare_reasoning_presence``: the markers around an assistant message's reasoning, as the
    template writes it), and its workarounds for the templates that do not write it."""
    source = getattr(renderer, "source", "") or ""
    try:
        shown = [_USER, {"role": "assistant", "content": _ANSWER, REASONING: _THOUGHT}]
        found = _WRAPPED.search(_render(renderer, shown, None, {"enable_thinking": True}, prompt=False))
    except (ValueError, TypeError, KeyError):  # a template that refuses the probe has none found
        found = None
    if found:
        return found.group(1), found.group(2)
    return _family_markers(source)


def _family_markers(source: str) -> tuple[str, str]:
    """The markers of a template that does not write its reasoning back: the autoparser's workarounds,
    and the tags llama.cpp's own handlers of the families (``common/parsers/``) continue with."""
    old_qwen = "content.split('</think>')" in source and REASONING not in source and "<SPECIAL_12>" not in source
    granite = "Write your thoughts between <think></think> and write your response between <response></response>"
    if old_qwen or granite in source:
        return "<think>", "</think>"
    if all(tag in source for tag in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        return "<think>\n", "</think>"  # Nemotron Nano v2
    family = FAMILIES[family_of(source)]
    if family.name in _HANDLED:
        return _HANDLED[family.name]
    return next(((start, end) for start, end in family.think if start in source), ("", ""))


def continue_chat(
    renderer: Any, messages: Sequence[Message], tools: Any, kwargs: JsonObject, cont: Continuation
) -> Rendered:
    """The chat rendered to continue its last message, with the text the answer starts with as its
    ``prefill`` (what follows the template's own generation prompt)."""
    if isinstance(renderer, LegacyRenderer):  # --no-jinja: llama-server's legacy path renders it closed
        closed: Rendered = renderer.render(messages, tools=tools, add_generation_prompt=False, kwargs=kwargs)
        return closed
    history = messages[:-1]
    base: Rendered = renderer.render(history, tools=tools, add_generation_prompt=False, kwargs=kwargs)
    msg = cont.message
    content = _content(msg)
    if not content and not msg.get(REASONING) and not msg.get("tool_call_id"):  # common_chat_msg::empty()
        return base
    with_prompt = _render(renderer, history, tools, kwargs, prompt=True)
    pairs = zip(base.prompt, with_prompt, strict=False)  # llama.cpp's diff: after the common prefix, by character
    same = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(base.prompt), len(with_prompt)))
    generation = with_prompt[same:]
    start, end = reasoning_markers(renderer)
    prefill = ""
    if start:
        cut = generation.find(start)
        generation = generation if cut < 0 else generation[:cut]
        prefill = start + str(msg.get(REASONING) or "") + (end if cont.mode == CONTENT else "")
    if cont.mode == CONTENT:
        prefill += content
    prompt = base.prompt + generation + prefill
    # the answer is read after the opening tag, as a generation prompt that opened the reasoning (_parse)
    think = FAMILIES[family_of(getattr(renderer, "source", "") or "")].think
    if start and any(start.strip() == tag.strip() for tag, _ in think):
        prefill = prefill[len(start) :]
    return Rendered(prompt, base.add_special, base.stops, prefill=prefill, quiet_prefill=cont.asked)
