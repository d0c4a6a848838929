"""A chat's tools as llama.cpp reads them: the ``tools`` list and ``tool_choice`` checked, the calls'
grammar, and the system prompts that describe the tools to a template that does not write them."""

from __future__ import annotations

import json
import re
from typing import Any

from workers.inference.http._errors import ApiError
from workers.inference.http._json import Json, JsonObject
from workers.inference.http._schema_grammar import schema_to_gbnf
from workers.inference.http.chat._grammar import tool_grammar as family_grammar
from workers.inference.http.chat._template import Message, message_text

_GENERIC_PROMPT = (
    "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` "
    "reply to the user's request"
)


_POLYFILL_PROMPT = "You can call any of the following tools to satisfy the user's requests: "


def tool_functions(tools: Json) -> list[JsonObject]:
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ApiError(400, "'tools' must be a list of objects")
    fns = []
    for i, tool in enumerate(tools):
        fn = tool.get("function")
        if (
            tool.get("type", "function") != "function"
            or not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
        ):
            raise ApiError(400, f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., ...}}}}")
        fns.append(fn)
    return fns


def tool_choice_mode(tool_choice: Any, names: list[str]) -> tuple[str, list[str]]:
    """``(mode, allowed names)``: mode ``auto``, ``required`` or ``none``."""
    if tool_choice is None or tool_choice == "auto":
        return "auto", names
    if tool_choice in ("required", "none"):
        return str(tool_choice), names
    if isinstance(tool_choice, dict) and isinstance((tool_choice.get("function") or {}).get("name"), str):
        name = tool_choice["function"]["name"]
        if name not in names:
            raise ApiError(400, f"tool_choice names {name!r}, which is not one of the tools")
        return "required", [name]
    raise ApiError(400, "'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'function': {...}}")


def _call_schema(fns: list[JsonObject], names: list[str], args_key: str) -> JsonObject:
    variants: list[JsonObject] = [
        {
            "type": "object",
            "properties": {"name": {"const": fn["name"]}, args_key: fn.get("parameters") or {"type": "object"}},
            "required": ["name", args_key],
        }
        for fn in fns
        if fn["name"] in names
    ]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def schema_gbnf(schema: Json, rule: str) -> str:
    """The GBNF of ``schema`` with its root renamed ``rule`` (to embed it in a larger grammar)."""
    try:
        text = schema_to_gbnf(schema)
    except Exception as exc:  # the converter raises plain exceptions on schemas it cannot express
        raise ApiError(400, f"a tool's parameters cannot be turned into a grammar: {exc}") from None
    return re.sub(r"^root ::=", f"{rule} ::=", text, flags=re.MULTILINE)


def call_grammar(
    syntax: str, fns: list[JsonObject], names: list[str], *, parallel: bool, free: bool, template: str = ""
) -> str | None:
    """GBNF for tool calls in ``syntax``; ``free`` (generic syntax only): a plain answer is allowed too.
    None: the family has no grammar here (LFM2), the output is parsed without one."""
    if syntax == "generic":
        call = _call_schema(fns, names, "arguments")
        calls: JsonObject = {"type": "array", "items": call, "minItems": 1, **({} if parallel else {"maxItems": 1})}
        schema: JsonObject = {"type": "object", "properties": {"tool_calls": calls}, "required": ["tool_calls"]}
        if free:
            answer: JsonObject = {
                "type": "object",
                "properties": {"response": {"type": "string"}},
                "required": ["response"],
            }
            schema = {"anyOf": [schema, answer]}
        return schema_gbnf(schema, "root")
    return family_grammar(syntax, fns, names, parallel=parallel, template=template)


def generic_system(messages: list[Message], fns: list[JsonObject]) -> list[Message]:
    """llama.cpp's generic tool prompt, added to (or as) the system message."""
    text = f"{_GENERIC_PROMPT}\n\nAvailable tools:\n" + "\n".join(json.dumps(fn, ensure_ascii=False) for fn in fns)
    return _with_system(messages, text)


def _with_system(messages: list[Message], text: str) -> list[Message]:
    """``text`` added to the system message (or as one)."""
    if messages and messages[0].get("role") == "system":
        first = {**messages[0], "content": message_text(messages[0].get("content")) + "\n\n" + text}
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def tools_system(messages: list[Message], fns: list[JsonObject]) -> list[Message]:
    """The tools, for a template that writes calls but not the tools (minja's polyfill, which
    llama.cpp used before its autoparser; without it such a model cannot know what it may call)."""
    text = _POLYFILL_PROMPT + json.dumps(
        [{"type": "function", "function": fn} for fn in fns], indent=2, ensure_ascii=False
    )
    return _with_system(messages, text)
