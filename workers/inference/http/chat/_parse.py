"""A model's chat output -> the message it means: content, ``reasoning_content``, tool calls.

Pure functions over the text generated so far, as llama-server's chat parsers
(``common/chat*.cpp``) are: :func:`parse` reads a partial output as well as a
whole one, and :func:`diff` turns two successive readings into the deltas a
stream sends (``common_chat_msg_diff``), so streamed and whole answers agree by
construction. What is still ambiguous in a partial output (a trailing ``<``
that may open ``</think>``, an unfinished tool call's JSON) is held back until
the next token decides it.

Tool-call syntaxes, chosen from the chat template's text as llama.cpp
recognises the families (:mod:`workers.inference.http.chat._formats` has the
list and each family's reader), among them:

* ``hermes`` (Qwen 2.5/3, Hermes, Granite 4, many fine-tunes):
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, repeated for parallel calls;
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` or ``[TOOL_CALLS]name[ARGS]{...}``;
* ``llama3`` (Llama 3.x): a bare ``{"name": ..., "parameters": {...}}`` (after ``<|python_tag|>`` or not);
* ``generic`` (templates that know no tools): llama.cpp's generic JSON,
  ``{"tool_calls": [{"name": ..., "arguments": {...}}]}``, ``{"tool_call": {...}}`` or ``{"response": "..."}``;
* DeepSeek R1/V3.1/V3.2/V4, Qwen3-Coder, GPT-OSS (harmony channels), Kimi K2, GLM,
  MiniMax-M2, Seed-OSS, Command R7B, Command R+, Apertus, LFM2, Gemma 4, Nemotron v2, Apriel,
  FireFunction v2, Functionary v3.1/v3.2, Granite 3.

Reasoning (``reasoning_format``): ``deepseek`` (llama-server's ``auto``) moves
the family's reasoning (``<think>...</think>``, Seed-OSS's ``<seed:think>``,
Command R7B's ``<|START_THINKING|>``, Magistral's ``[THINK]``, Apertus'
``<|inner_prefix|>``, GPT-OSS's ``analysis`` channel) to
``reasoning_content``; ``deepseek-legacy`` also keeps the tags in
``content``; ``none`` leaves everything in ``content``. A prompt that already
opened the reasoning (a template's generation prompt) starts the output inside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict

from workers.inference.http.chat._formats import FAMILIES, THINK, WRITES_FUNCTIONS, Family, family_of
from workers.inference.http.chat._markup import HARMONY_MARKERS, Types, calls_in, harmony, held

THINK_OPEN, THINK_CLOSE = THINK
SYNTAXES = tuple(FAMILIES)


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as the model wrote it (OpenAI's ``function.arguments``)
    id: str


@dataclass
class ChatMessage:
    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass(frozen=True)
class Delta:
    """One change between two readings (llama-server's ``common_chat_msg_diff``)."""

    content: str = ""
    reasoning_content: str = ""
    tool_index: int = -1  # -1: no tool call in this delta
    tool_id: str = ""  # set on a call's first delta, with its name
    tool_name: str = ""
    tool_arguments: str = ""


def syntax_of(template: str) -> str:
    """The tool-call syntax (the family) a chat template uses."""
    return family_of(template)


def template_knows_tools(template: str) -> bool:
    """Whether a template writes the request's ``tools`` itself (else a system message does);
    FireFunction v2's writes them as its ``functions`` variable."""
    return "tools" in template or WRITES_FUNCTIONS in template


def thinking_prompt(prompt: str, family: str) -> bool:
    """Whether a rendered prompt ends inside the family's reasoning (its generation prompt opened it)."""
    tail = prompt.rstrip()
    return any(tail.endswith(open_) for open_, _ in FAMILIES[family].think)


def _split_reasoning(text: str, fmt: str, thinking: bool, final: bool, fam: Family) -> tuple[str, str]:
    """``(reasoning, rest)`` of the output."""
    if fmt == "none" or not fam.think:
        return "", text
    stripped = text.lstrip()
    tags = fam.think[0]
    if thinking:  # the prompt opened it: the first pair that closes in the output, else the family's own
        tags = next(((o, c) for o, c in fam.think if c in text), tags)
    else:
        for open_, close in fam.think:
            if stripped.startswith(open_):
                text, thinking, tags = stripped[len(open_) :], True, (open_, close)
                break
            if not final and stripped and open_.startswith(stripped):
                return "", ""  # maybe "<thi..." yet: decide at the next token
    if not thinking:
        return "", text
    end = text.find(tags[1])
    if end < 0:
        if final:
            return text, ""
        # trailing whitespace may be the end of the reasoning (trimmed at the close): held too
        kept = text[: len(text) - held(text, (tags[1],))]
        return kept.rstrip(), ""
    return text[:end].rstrip(), text[end + len(tags[1]) :].lstrip("\n")


def _json_section(rest: str, syntax: str) -> tuple[str, list[tuple[str, str]]] | None:
    """Llama 3's and the generic syntax's calls: a bare JSON object that starts the answer."""
    head = rest.lstrip()
    if syntax == "llama3":
        head = head.removeprefix("<|python_tag|>").lstrip()
    if not head.startswith("{"):
        return None
    if syntax == "generic":
        for key, single in (('"tool_calls"', False), ('"tool_call"', True)):
            at = head.find(key)
            if 0 <= at < 8:
                calls, _ = calls_in(head[at + len(key) :], ("arguments",))
                return "", calls[:1] if single else calls
        return None
    calls, _ = calls_in(head, ("parameters", "arguments"))
    return ("", calls) if calls else None


def _generic_response(rest: str) -> str | None:
    """The text of llama.cpp's generic ``{"response": "..."}`` answer, if that is what ``rest`` is."""
    try:
        value = json.loads(rest)
    except json.JSONDecodeError:
        return None
    return value["response"] if isinstance(value, dict) and isinstance(value.get("response"), str) else None


def _content(text: str, fam: Family, final: bool, markers: tuple[str, ...]) -> str:
    """Content as it may be sent now: the family's wrappers removed, a partial marker at the end held."""
    for marker in fam.strip:
        text = text.replace(marker, "")
    if final:
        return text
    text = text[: len(text) - held(text, (*markers, *fam.strip))]
    return text if text.strip() else ""  # only whitespace so far: may be the space before a call


def _parse_harmony(
    text: str, reasoning_format: str, final: bool, ids: Callable[[int], str], tools: bool
) -> ChatMessage:
    if reasoning_format == "none":
        keep = 0 if final else held(text, HARMONY_MARKERS)
        return ChatMessage(content=text[: len(text) - keep])
    reasoning, content, calls = harmony(text, final)
    msg = ChatMessage(reasoning_content=reasoning, content=content)
    if tools:  # no tools asked for (or tool_choice none): a message to a function is not read as a call
        msg.tool_calls = [ToolCall(name, args, ids(i)) for i, (name, args) in enumerate(calls)]
    return msg


def parse(
    text: str,
    *,
    syntax: str | None,
    reasoning_format: str = "deepseek",
    thinking: bool = False,
    final: bool = True,
    ids: Callable[[int], str] = lambda i: f"call_{i}",
    family: str | None = None,
    types: Types | None = None,
) -> ChatMessage:
    """The message ``text`` (all of the output so far) means.

    ``syntax``: the tool-call syntax, None: tools are not parsed; ``family``: the template's family,
    whose reasoning tags apply (default: ``syntax``'s); ``types``: each tool's parameters schema,
    so XML-written parameters get their JSON types.
    """
    fam = FAMILIES[family or syntax or "generic"]
    if fam.name == "gpt-oss":
        return _parse_harmony(text, reasoning_format, final, ids, syntax is not None)
    reasoning, rest = _split_reasoning(text, reasoning_format, thinking, final, fam)
    msg = ChatMessage(reasoning_content=reasoning)
    if reasoning_format == "deepseek-legacy" and (reasoning or thinking):
        msg.content = text if not thinking else fam.think[0][0] + text
        return msg
    if syntax is None:
        msg.content = _content(rest, fam, final, ())
        return msg
    tools = FAMILIES[syntax]
    bare_json = syntax in ("llama3", "generic")
    section = _json_section(rest, syntax) if bare_json else tools.reader(rest, final, types or {})
    if section is None:
        json_like = bare_json and rest.lstrip().startswith(("{", "<|python_tag|>"))
        if json_like and not final:
            return msg  # a tool call or an answer in JSON: decided when it is complete
        response = _generic_response(rest) if syntax == "generic" and final else None
        if response is not None:
            msg.content = response
            return msg
        body = tools.content(rest, final) if tools.content else rest
        msg.content = _content(body, fam, final, tools.starts)
        return msg
    content, calls = section
    msg.content = _content(content, fam, True, ()) if content.strip() else ""
    msg.tool_calls = [ToolCall(name, args, ids(i)) for i, (name, args) in enumerate(calls)]
    return msg


def diff(before: ChatMessage, after: ChatMessage) -> list[Delta]:
    """The deltas that take a stream from ``before`` to ``after`` (text only ever grows)."""
    out: list[Delta] = []
    if len(after.reasoning_content) > len(before.reasoning_content):
        out.append(Delta(reasoning_content=after.reasoning_content[len(before.reasoning_content) :]))
    if len(after.content) > len(before.content):
        out.append(Delta(content=after.content[len(before.content) :]))
    for i, call in enumerate(after.tool_calls):
        if i >= len(before.tool_calls):
            out.append(Delta(tool_index=i, tool_id=call.id, tool_name=call.name, tool_arguments=call.arguments))
            continue
        old = before.tool_calls[i].arguments
        if len(call.arguments) > len(old) and call.arguments.startswith(old):
            out.append(Delta(tool_index=i, tool_arguments=call.arguments[len(old) :]))
    return out


class FunctionCallJson(TypedDict):
    name: str
    arguments: str


class ToolCallJson(TypedDict):
    """A tool call in OpenAI's shape."""

    type: str
    function: FunctionCallJson
    id: str


def tool_call_json(call: ToolCall) -> ToolCallJson:
    """A tool call in OpenAI's shape."""
    return {"type": "function", "function": {"name": call.name, "arguments": call.arguments}, "id": call.id}
