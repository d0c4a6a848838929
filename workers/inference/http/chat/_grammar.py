"""GBNF that makes a model call tools, in its template family's syntax (``tool_choice`` ``required`` or named).

As llama.cpp's chat handlers build theirs (``common/chat*.cpp``): the call
markers are literals, the function name a literal per allowed tool, and the
arguments the tool's JSON schema through the JSON-schema converter
(llama-cpp-python's :class:`~llama_cpp.llama_grammar.SchemaConverter`, one
converter for every tool so shared rules are written once). Families that
write parameters as XML (Qwen3-Coder, Seed-OSS, GLM, MiniMax-M2, DeepSeek
V3.2/V4's DSML) get one
element per parameter: the required ones in the schema's order, then the
optional ones; a ``string`` parameter is free text up to its closing tag,
anything else JSON. LFM2 (Python-call syntax) and Gemma 4 (its own
object syntax) have no grammar here: their ``required`` is not enforced, and
the output is still parsed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.inference.http._errors import ApiError
from workers.inference.http.chat._formats import DS_CALL, DS_CALL_END, DS_SECTION, DS_SECTION_END, DS_SEP
from workers.inference.http.chat._markup import DSML

NL = "\n"


def lit(text: str) -> str:
    """A GBNF string literal."""
    return json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True)
class _Shape:
    """How calls are laid out: ``open call (sep call)* close``; ``call(name, args_rule)`` one call."""

    call: Callable[[str, str], str]
    open: str = ""
    sep: str = ""
    close: str = ""


def _json_call(name_key: str = "name", args_key: str = "arguments", extra: str = "") -> Callable[[str, str], str]:
    """``{"name": "NAME", "arguments": ARGS}`` (``extra``: GBNF written before the name's member)."""

    def call(name: str, args: str) -> str:
        head = lit(f'"{name_key}": {json.dumps(name)}, "{args_key}": ')
        return f'"{{" {extra}{head} {args} "}}"'

    return call


def _shapes(template: str) -> dict[str, _Shape]:
    json_call = _json_call()
    r1 = "```json" in template  # R1 names the function on the line after "function", in a ```json fence

    def ds_call(name: str, args: str) -> str:
        if r1:
            return f"{lit(f'{DS_CALL}function{DS_SEP}{name}' + NL + '```json' + NL)} {args} {lit('```' + DS_CALL_END)}"
        return f"{lit(DS_CALL + name + DS_SEP)} {args} {lit(DS_CALL_END)}"

    mistral = (
        _Shape(lambda n, a: f"{lit('[TOOL_CALLS]' + n + '[ARGS]')} {a}")
        if "[ARGS]" in template
        else _Shape(json_call, "[TOOL_CALLS][", ", ", "]")
    )
    return {
        "hermes": _Shape(lambda n, a: f'"<tool_call>\\n" {json_call(n, a)} "\\n</tool_call>"', sep="\n"),
        "mistral": mistral,
        "llama3": _Shape(_json_call(args_key="parameters")),
        "deepseek": _Shape(ds_call, DS_SECTION, "", DS_SECTION_END),
        "kimi-k2": _Shape(
            lambda n, a: (
                f'{lit("<|tool_call_begin|>functions." + n + ":")} [0-9]+ "<|tool_call_argument_begin|>" {a} '
                '"<|tool_call_end|>"'
            ),
            "<|tool_calls_section_begin|>",
            "",
            "<|tool_calls_section_end|>",
        ),
        "functionary-v3.1": _Shape(lambda n, a: f'{lit("<function=" + n + ">")} {a} "</function>"'),
        "functionary-v3.2": _Shape(lambda n, a: f"{lit(n + NL)} {a}", sep=">>>"),
        "nemotron-v2": _Shape(json_call, "<TOOLCALL>[", ", ", "]</TOOLCALL>"),
        "apriel": _Shape(json_call, "<tool_calls>[", ", ", "]</tool_calls>"),
        "firefunction-v2": _Shape(json_call, " functools[", ", ", "]"),
        "granite": _Shape(json_call, "<|tool_call|>[", ", ", "]"),
        "command-r7b": _Shape(
            _json_call("tool_name", "parameters", extra='"\\"tool_call_id\\": \\"" [0-9]+ "\\", " '),
            "<|START_ACTION|>[\n    ",
            ",\n    ",
            "\n]<|END_ACTION|>",
        ),
        "command-r-plus": _Shape(_json_call("tool_name", "parameters"), "Action:\n```json\n[", ", ", "]\n```"),
        "apertus": _Shape(
            lambda n, a: f'"{{" {lit(json.dumps(n) + ": ")} {a} "}}"', "<|tools_prefix|>[", ", ", "]<|tools_suffix|>"
        ),
        "gpt-oss": _Shape(
            lambda n, a: f"{lit('<|channel|>commentary to=functions.' + n + ' <|constrain|>json<|message|>')} {a}"
        ),
    }


@dataclass(frozen=True)
class _XmlShape:
    call_open: Callable[[str], str]  # the literal text before the parameters
    call_close: str
    param_open: Callable[[str, bool], str]  # (key, whether its value is a string)
    param_close: str
    open: str = ""
    sep: str = ""
    close: str = ""


def _xml_shapes(template: str) -> dict[str, _XmlShape]:
    block = f"{DSML}function_calls" if "function_calls" in template else f"{DSML}tool_calls"  # V3.2, else V4
    dsml = _XmlShape(
        lambda n: f'<{DSML}invoke name="{n}">\n',
        f"</{DSML}invoke>\n",
        lambda k, string: f'<{DSML}parameter name="{k}" string="{"true" if string else "false"}">',
        f"</{DSML}parameter>\n",
        f"<{block}>\n",
        "",
        f"</{block}>",
    )
    return {**_XML, "deepseek-dsml": dsml}


_XML = {
    "qwen3-coder": _XmlShape(
        lambda n: f"<tool_call>\n<function={n}>\n",
        "</function>\n</tool_call>",
        lambda k, _s: f"<parameter={k}>\n",
        "\n</parameter>\n",
        sep="\n",
    ),
    "seed-oss": _XmlShape(
        lambda n: f"<seed:tool_call>\n<function={n}>\n",
        "</function>\n</seed:tool_call>",
        lambda k, _s: f"<parameter={k}>",
        "</parameter>\n",
        sep="\n",
    ),
    "glm": _XmlShape(
        lambda n: f"<tool_call>{n}\n",
        "</tool_call>",
        lambda k, _s: f"<arg_key>{k}</arg_key>\n<arg_value>",
        "</arg_value>\n",
        sep="\n",
    ),
    "minimax-m2": _XmlShape(
        lambda n: f'<invoke name="{n}">\n',
        "</invoke>\n",
        lambda k, _s: f'<parameter name="{k}">',
        "</parameter>\n",
        "<minimax:tool_call>\n",
        "",
        "</minimax:tool_call>",
    ),
}

GRAMMAR_SYNTAXES = frozenset(
    {
        *_XML,
        "deepseek-dsml",
        "hermes",
        "mistral",
        "llama3",
        "deepseek",
        "kimi-k2",
        "functionary-v3.1",
        "functionary-v3.2",
        "nemotron-v2",
        "apriel",
        "firefunction-v2",
        "granite",
        "command-r7b",
        "command-r-plus",
        "apertus",
        "gpt-oss",
    }
)


def _converter() -> Any:  # Any: llama-cpp-python's untyped SchemaConverter
    from llama_cpp import llama_grammar

    converter: Any = llama_grammar.SchemaConverter  # Any: its __init__ is not annotated
    return converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def _visit(conv: Any, schema: Any, name: str) -> str:  # Any: the converter and a JSON schema
    try:
        return str(conv.visit(conv.resolve_refs(schema, "stdin"), name))
    except Exception as exc:  # the converter raises plain exceptions on schemas it cannot express
        raise ApiError(400, f"a tool's parameters cannot be turned into a grammar: {exc}") from None


# Any: the converter, and a tool's parameters JSON schema as the client sent it
def _xml_params(conv: Any, shape: _XmlShape, params: dict[str, Any], rule: str) -> str:
    """The GBNF sequence of one call's parameters (required ones first, in order, then optional ones)."""
    props = params.get("properties") or {}
    required = [k for k in params.get("required") or [] if k in props]
    parts = []
    for key in [*required, *(k for k in props if k not in required)]:
        schema = props[key]
        close = shape.param_close
        if isinstance(schema, dict) and schema.get("type") == "string" and isinstance(schema.get("enum"), list):
            value = "( " + " | ".join(lit(str(v)) for v in schema["enum"]) + " )"  # raw text, not JSON strings
        elif isinstance(schema, dict) and schema.get("type") == "string":
            value = f"{conv.not_literal(close.strip())}*"
        else:
            value = _visit(conv, schema if isinstance(schema, dict) else {}, f"{rule}-{key}")
        is_string = isinstance(schema, dict) and schema.get("type") == "string"
        element = f"{lit(shape.param_open(key, is_string))} {value} {lit(close)}"
        parts.append(element if key in required else f"( {element} )?")
    return " ".join(parts) if parts else '""'


def tool_grammar(
    syntax: str,
    fns: list[dict[str, Any]],  # Any: each tool's function as the client sent it (parameters: a JSON schema)
    names: list[str],
    *,
    parallel: bool,
    template: str = "",
) -> str | None:
    """GBNF that makes the output tool calls in ``syntax`` (None: no grammar for this family)."""
    conv = _converter()
    allowed = [fn for fn in fns if fn["name"] in names]
    calls = []
    xml = _xml_shapes(template).get(syntax)
    shapes = _shapes(template)
    if xml is None and syntax not in shapes:
        return None
    for i, fn in enumerate(allowed):
        params = fn.get("parameters") or {"type": "object"}
        if xml is not None:
            body = _xml_params(conv, xml, params, f"tool{i}")
            calls.append(f"{lit(xml.call_open(fn['name']))} {body} {lit(xml.call_close)}")
        else:
            args = _visit(conv, params, f"tool{i}-args")
            calls.append(shapes[syntax].call(fn["name"], args))
    conv._add_rule("tool-call", " | ".join(f"( {c} )" for c in calls))
    shape: _Shape | _XmlShape = xml if xml is not None else shapes[syntax]
    more = (
        f" ( {lit(shape.sep) if shape.sep else ''} tool-call )*"
        if parallel and syntax not in ("llama3", "gpt-oss")
        else ""
    )
    opening = f"{lit(shape.open)} " if shape.open else ""
    closing = f" {lit(shape.close)}" if shape.close else ""
    conv._add_rule("root", f"{opening}tool-call{more}{closing}")
    return str(conv.format_grammar())
