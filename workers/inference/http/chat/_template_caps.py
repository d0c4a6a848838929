"""What a chat template can do: ``/props``' ``chat_template_caps``, as llama.cpp's ``jinja::caps_get`` finds it.

llama.cpp renders the template with probe chats and watches which inputs its
own Jinja runtime reads. jinja2 keeps no such record, so each probe here puts
a marker where the input goes and looks for it in the output (what minja, the
engine llama.cpp used before its own, did): a system message whose text comes
out is a supported system role, a tool whose name comes out is supported
tools, and so on. The one question output cannot answer, whether the
template reads ``reasoning_effort``, is answered from the template's syntax
tree (jinja2's ``meta.find_undeclared_variables``). A template that fails on a
probe keeps llama.cpp's default for that capability.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

# llama.cpp's defaults (common/jinja/caps.h), kept where a probe cannot tell
DEFAULTS = {
    "supports_object_arguments": False,
    "supports_parallel_tool_calls": True,
    "supports_preserve_reasoning": False,
    "supports_reasoning_effort": False,
    "supports_string_content": True,
    "supports_system_role": True,
    "supports_tool_calls": True,
    "supports_tools": True,
    "supports_typed_content": False,
}
_PRESERVE = {
    "preserve_thinking": True,
    "clear_thinking": False,
    "truncate_history_thinking": False,
    "drop_thinking": False,
}
_TOOL = {
    "type": "function",
    "function": {
        "name": "TOOL_MARKER",
        "description": "Tool description",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]},
    },
}


# Any: a probe message's values, as the template under test reads them (strings, parts, calls)
Probe = dict[str, Any]


def _user(content: Any) -> Probe:
    return {"role": "user", "content": content}


def _call(name: str, arguments: Any) -> Probe:
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _calls(*calls: Probe) -> list[Probe]:
    """A chat whose assistant turn makes ``calls``, answered, then a new user turn."""
    return [
        _user("User message"),
        {"role": "assistant", "content": "", "tool_calls": list(calls)},
        {"role": "tool", "content": "Tool response", "tool_call_id": calls[0]["id"]},
        {"role": "assistant", "content": "Done"},
        _user("User message"),
    ]


@functools.cache
def template_caps(source: str) -> dict[str, bool]:
    """The capabilities of the Jinja chat template ``source`` (llama.cpp's defaults for an empty one)."""
    caps = dict(DEFAULTS)
    if not source:
        return caps
    try:
        from jinja2 import meta
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        env_source = Jinja2ChatFormatter(source, eos_token="", bos_token="", add_generation_prompt=True)
        template: Any = env_source._environment  # jinja2's Template, compiled in its sandbox
        names = meta.find_undeclared_variables(template.environment.parse(source))
    except Exception:  # a template that does not parse: /props says what llama.cpp assumes
        return caps

    def out(messages: Any, **extra: Any) -> str | None:  # Any: llama-cpp-python types them as TypedDicts
        try:
            return str(env_source(messages=messages, **extra).prompt)
        except Exception:  # raise_exception(), a type error: this probe tells nothing
            return None

    def probe(key: str, found: Callable[[str], bool], messages: list[Probe], **extra: Any) -> None:
        text = out(messages, **extra)
        if text is not None:
            caps[key] = found(text)

    probe("supports_string_content", lambda t: "STRING_MARKER" in t, [_user("STRING_MARKER")])
    probe("supports_typed_content", lambda t: "TYPED_MARKER" in t, [_user([{"type": "text", "text": "TYPED_MARKER"}])])
    probe(
        "supports_system_role",
        lambda t: "SYSTEM_MARKER" in t,
        [{"role": "system", "content": "SYSTEM_MARKER"}, _user("User message")],
    )
    probe("supports_tools", lambda t: "TOOL_MARKER" in t, [_user("User message")], tools=[_TOOL])
    probe(
        "supports_tool_calls", lambda t: "CALL_MARKER" in t, _calls(_call("CALL_MARKER", '{"arg": "v"}')), tools=[_TOOL]
    )
    if caps["supports_tool_calls"]:
        probe(
            "supports_object_arguments",
            lambda t: "ARG_MARKER" in t,
            _calls(_call("CALL_MARKER", {"arg": "ARG_MARKER"})),
            tools=[_TOOL],
        )
        probe(
            "supports_parallel_tool_calls",
            lambda t: "FIRST_CALL" in t and "SECOND_CALL" in t,
            _calls(_call("FIRST_CALL", '{"arg": "v"}'), _call("SECOND_CALL", '{"arg": "v"}')),
            tools=[_TOOL],
        )
    else:
        caps["supports_parallel_tool_calls"] = False
    reasoned = [
        _user("User message"),
        {"role": "assistant", "content": "Answer", "reasoning_content": "THINK_MARKER"},
        _user("User message"),
    ]
    probe("supports_preserve_reasoning", lambda t: "THINK_MARKER" in t, reasoned, **_PRESERVE)
    caps["supports_reasoning_effort"] = bool({"reasoning_effort", "reasoning_strength"} & names)
    return caps
