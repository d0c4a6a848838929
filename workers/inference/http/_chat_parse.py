"""A model's chat output -> the message it means: content, ``reasoning_content``, tool calls.

Pure functions over the text generated so far, as llama-server's chat parsers
(``common/chat*.cpp``) are: :func:`parse` reads a partial output as well as a
whole one, and :func:`diff` turns two successive readings into the deltas a
stream sends (``common_chat_msg_diff``), so streamed and whole answers agree by
construction. What is still ambiguous in a partial output (a trailing ``<``
that may open ``</think>``, an unfinished tool call's JSON) is held back until
the next token decides it.

Tool-call syntaxes, chosen from the chat template's text as llama.cpp's
autoparser recognises the families:

* ``hermes`` (Qwen 2.5/3, Hermes, many fine-tunes):
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, repeated for parallel calls;
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``;
* ``llama3`` (Llama 3.x): a bare ``{"name": ..., "parameters": {...}}`` (after ``<|python_tag|>`` or not);
* ``generic`` (templates that know no tools): llama.cpp's generic JSON,
  ``{"tool_calls": [{"name": ..., "arguments": {...}}]}``, ``{"tool_call": {...}}`` or ``{"response": "..."}``.

Reasoning (``reasoning_format``): ``deepseek`` (llama-server's ``auto``) moves
``<think>...</think>`` to ``reasoning_content``; ``deepseek-legacy`` also
keeps the tags in ``content``; ``none`` leaves everything in ``content``. A
prompt that already opened ``<think>`` (a template's generation prompt) starts
the output inside the reasoning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SYNTAXES = ("hermes", "mistral", "llama3", "generic")
_MARKERS = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]"}
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


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
    """The tool-call syntax a chat template's family uses."""
    if "<tool_call>" in template:
        return "hermes"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    return "generic"


def template_knows_tools(template: str) -> bool:
    """Whether a template writes the request's ``tools`` itself (else the generic system prompt does)."""
    return "tools" in template


def _held(text: str, markers: tuple[str, ...]) -> int:
    """How many trailing characters of ``text`` could be the start of a marker (kept back)."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:n]):
                best = max(best, n)
                break
    return best


def _split_reasoning(text: str, fmt: str, thinking: bool, final: bool) -> tuple[str, str]:
    """``(reasoning, rest)`` of the output."""
    if fmt == "none":
        return "", text
    stripped = text.lstrip()
    if not thinking:
        if stripped.startswith(THINK_OPEN):
            text, thinking = stripped[len(THINK_OPEN) :], True
        elif not final and THINK_OPEN.startswith(stripped) and stripped:
            return "", ""  # maybe "<thi..." yet: decide at the next token
    if not thinking:
        return "", text
    end = text.find(THINK_CLOSE)
    if end < 0:
        keep = 0 if final else _held(text, (THINK_CLOSE,))
        return text[: len(text) - keep], ""
    return text[:end], text[end + len(THINK_CLOSE) :].lstrip("\n")


def _scan_value(text: str, start: int) -> tuple[int, bool]:
    """Where the JSON value at ``start`` ends (exclusive) and whether it is complete."""
    depth, i, in_str = 0, start, False
    while i < len(text):
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
                if depth == 0:
                    return i + 1, True
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            if depth == 0:
                return i, True  # the end of the enclosing object: a scalar value ends here
            depth -= 1
            if depth == 0:
                return i + 1, True
        elif depth == 0 and c in ",\n":
            return i, True
        i += 1
    return len(text), False


def _object(text: str, arg_keys: tuple[str, ...]) -> tuple[str | None, str, bool, int]:
    """One tool-call object at the start of ``text``: ``(name, arguments so far, complete, end)``."""
    name_match = _NAME.search(text)
    name = json.loads(f'"{name_match.group(1)}"') if name_match else None
    args_at = -1
    for key in arg_keys:
        m = re.search(rf'"{key}"\s*:\s*', text)
        if m:
            args_at = m.end()
            break
    if args_at < 0 or args_at >= len(text):
        end, done = _scan_value(text, 0)
        return name, "", False, end
    end, done = _scan_value(text, args_at)
    args = text[args_at:end]
    obj_end, obj_done = _scan_value(text, 0)
    return name, args, done and obj_done, obj_end


def _calls_in(body: str, arg_keys: tuple[str, ...]) -> tuple[list[tuple[str, str]], bool]:
    """Tool calls ``(name, arguments)`` in a run of JSON objects (an array's items, or one object);
    the second value: whether the last one is complete."""
    calls: list[tuple[str, str]] = []
    i = 0
    complete = True
    while i < len(body):
        start = body.find("{", i)
        if start < 0:
            break
        name, args, done, end = _object(body[start:], arg_keys)
        if name is None:
            complete = done
            break
        calls.append((name, args))
        complete = done
        i = start + end
        if not done:
            break
    return calls, complete


def _tool_section(rest: str, syntax: str) -> tuple[str, list[tuple[str, str]]] | None:
    """``(content, calls)`` when ``rest`` holds (the start of) tool calls in ``syntax``; None if it does not."""
    marker = _MARKERS.get(syntax)
    if marker is not None:
        at = rest.find(marker)
        if at < 0:
            return None
        content = rest[:at]
        if syntax == "mistral":
            calls, _ = _calls_in(rest[at + len(marker) :], ("arguments",))
            return content, calls
        calls = []
        for piece in rest[at:].split(marker)[1:]:
            body = piece.split("</tool_call>", 1)[0]
            found, _ = _calls_in(body, ("arguments", "parameters"))
            calls += found[:1]
        return content, calls
    head = rest.lstrip()
    if syntax == "llama3":
        head = head.removeprefix("<|python_tag|>").lstrip()
    if not head.startswith("{"):
        return None
    if syntax == "generic":
        for key, single in (('"tool_calls"', False), ('"tool_call"', True)):
            at = head.find(key)
            if 0 <= at < 8:
                calls, _ = _calls_in(head[at + len(key) :], ("arguments",))
                return "", calls[:1] if single else calls
        return None
    calls, _ = _calls_in(head, ("parameters", "arguments"))
    return ("", calls) if calls else None


def _generic_response(rest: str) -> str | None:
    """The text of llama.cpp's generic ``{"response": "..."}`` answer, if that is what ``rest`` is."""
    try:
        value = json.loads(rest)
    except json.JSONDecodeError:
        return None
    return value["response"] if isinstance(value, dict) and isinstance(value.get("response"), str) else None


def parse(
    text: str, *, syntax: str | None, reasoning_format: str = "deepseek", thinking: bool = False,
    final: bool = True, ids: Callable[[int], str] = lambda i: f"call_{i}",
) -> ChatMessage:  # fmt: skip
    """The message ``text`` (all of the output so far) means; ``syntax`` None: tools are not parsed."""
    reasoning, rest = _split_reasoning(text, reasoning_format, thinking, final)
    msg = ChatMessage(reasoning_content=reasoning)
    if reasoning_format == "deepseek-legacy" and (reasoning or thinking):
        msg.content = text if not thinking else THINK_OPEN + text
        return msg
    if syntax is None:
        msg.content = rest
        return msg
    section = _tool_section(rest, syntax)
    if section is None:
        json_like = syntax in ("llama3", "generic") and rest.lstrip().startswith(("{", "<|python_tag|>"))
        if json_like and not final:
            return msg  # a tool call or an answer in JSON: decided when it is complete
        response = _generic_response(rest) if syntax == "generic" and final else None
        marker = _MARKERS.get(syntax)
        keep = 0 if final or marker is None else _held(rest, (marker,))
        msg.content = response if response is not None else rest[: len(rest) - keep]
        return msg
    msg.content, calls = section
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


def tool_call_json(call: ToolCall) -> dict[str, Any]:
    """A tool call in OpenAI's shape."""
    return {"type": "function", "function": {"name": call.name, "arguments": call.arguments}, "id": call.id}
