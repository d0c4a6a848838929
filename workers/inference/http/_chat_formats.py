"""The chat-template families llama.cpp knows, and how each one's tool calls read (pure functions).

llama.cpp (``common/chat.cpp``) recognises a family from the text of the chat
template -- a dedicated handler for templates it names
(``common_chat_try_specialized_template``: GPT-OSS, Functionary v3.2, Kimi
K2, LFM2, Qwen3-Coder, Ministral/Magistral, ...), and a "differential
autoparser" for the rest, which renders the template with and without a tool
call and reads the markers off the difference (DeepSeek R1/V3.1, Command R7B,
FireFunction, Functionary v3.1, Granite, GLM, Apertus, Seed-OSS, MiniMax-M2,
Nemotron v2, Apriel, Hermes, ...). Here every family is recognised by the
markers its template writes (:func:`family_of`), in llama.cpp's order where
one template holds several families' markers, and read by a :class:`Family`.

A reader takes the output after the reasoning (``rest``) and answers ``None``
when no tool call has started, else ``(content, calls)``: the text before the
calls and each call's ``(name, arguments)`` so far. It is called again after
every token, so an unfinished call's arguments must only ever grow: JSON
arguments are cut where the model has written them, and XML parameters
(Qwen3-Coder, GLM, MiniMax-M2, Seed-OSS) join the JSON object one whole
parameter at a time; a call appears once its name is complete.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Call = tuple[str, str]  # (name, arguments as JSON text)
Types = Mapping[str, Mapping[str, Any]]  # tool name -> its parameters' schemas (Any: JSON schema values)
Reader = Callable[[str, bool, Types], "tuple[str, list[Call]] | None"]

THINK = ("<think>", "</think>")
# A template that adds the ``functions`` variable to its text (FireFunction v2) rather than reading ``tools``.
WRITES_FUNCTIONS = "+ functions"


@dataclass(frozen=True)
class Family:
    """How one template family writes reasoning and tool calls."""

    name: str
    reader: Reader
    starts: tuple[str, ...] = ()  # markers that open tool calls (a partial one is held back from content)
    think: tuple[tuple[str, str], ...] = (THINK,)  # (open, close) reasoning tags
    strip: tuple[str, ...] = ()  # markers removed from content (Command R7B's response wrappers)
    content: Callable[[str, bool], str] | None = None  # the content when no call was made, if not the text


# --- JSON pieces --------------------------------------------------------------------------------------


def scan_value(text: str, start: int) -> tuple[int, bool]:
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


def _key(name: str) -> re.Pattern[str]:
    return re.compile(rf'"{name}"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _object(text: str, name_key: str, arg_keys: tuple[str, ...]) -> tuple[str | None, str, bool, int]:
    """One tool-call object at the start of ``text``: ``(name, arguments so far, complete, end)``."""
    name_match = _key(name_key).search(text)
    name = json.loads(f'"{name_match.group(1)}"') if name_match else None
    args_at = -1
    for key in arg_keys:
        m = re.search(rf'"{key}"\s*:\s*', text)
        if m:
            args_at = m.end()
            break
    if args_at < 0 or args_at >= len(text):
        end, done = scan_value(text, 0)
        return name, "", False, end
    end, done = scan_value(text, args_at)
    args = text[args_at:end]
    obj_end, obj_done = scan_value(text, 0)
    return name, args, done and obj_done, obj_end


def calls_in(body: str, arg_keys: tuple[str, ...], name_key: str = "name") -> tuple[list[Call], bool]:
    """Tool calls in a run of JSON objects (an array's items, or one object);
    the second value: whether the last one is complete."""
    calls: list[Call] = []
    i = 0
    complete = True
    while i < len(body):
        start = body.find("{", i)
        if start < 0:
            break
        name, args, done, end = _object(body[start:], name_key, arg_keys)
        if name is None:
            complete = done
            break
        calls.append((name, args))
        complete = done
        i = start + end
        if not done:
            break
    return calls, complete


def _json_args(text: str) -> str:
    """The JSON value at the start of ``text`` (whitespace skipped), as far as it is written."""
    at = len(text) - len(text.lstrip())
    if not text.startswith(("{", "["), at):
        return ""  # not started yet (or a fence still being written)
    end, _ = scan_value(text, at)
    return text[at:end]


# --- Readers ------------------------------------------------------------------------------------------


def json_list(marker: str, name_key: str = "name", arg_keys: tuple[str, ...] = ("arguments",)) -> Reader:
    """``<marker>[{"name": ..., "arguments": {...}}, ...]`` (Nemotron v2, Apriel, FireFunction, Granite, Command R7B)."""

    def read(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
        at = rest.find(marker)
        if at < 0:
            return None
        calls, _ = calls_in(rest[at + len(marker) :], arg_keys, name_key)
        return rest[:at], calls

    return read


def hermes(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, repeated (Qwen 2.5/3, Hermes, Granite 4)."""
    at = rest.find("<tool_call>")
    if at < 0:
        return None
    calls: list[Call] = []
    for piece in rest[at:].split("<tool_call>")[1:]:
        found, _ = calls_in(piece.split("</tool_call>", 1)[0], ("arguments", "parameters"))
        calls += found[:1]
    return rest[:at], calls


def mistral(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    """``[TOOL_CALLS][{...}, ...]`` (Nemo), ``[TOOL_CALLS]name[ARGS]{...}`` (Ministral 3, Magistral,
    Devstral), ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`` (Small 3.2), the latter two repeated."""
    at = rest.find("[TOOL_CALLS]")
    if at < 0:
        return None
    calls: list[Call] = []
    for piece in rest[at:].split("[TOOL_CALLS]")[1:]:
        if piece.lstrip().startswith("["):
            found, _ = calls_in(piece, ("arguments",))
            calls += found
            continue
        args_at = piece.find("[ARGS]")
        if args_at < 0:
            break  # the name is not complete yet
        name = piece[:args_at].split("[CALL_ID]", 1)[0].strip()
        calls.append((name, _json_args(piece[args_at + len("[ARGS]") :])))
    return rest[:at], calls


def tagged(
    call_open: str, name_close: str, section: str | None = None, name_of: Callable[[str], str] = str.strip
) -> Reader:  # fmt: skip
    """``<section>`` then ``<call_open>NAME<name_close>{json}...`` for each call (Kimi K2, Functionary v3.1)."""

    def read(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
        found = [i for i in (rest.find(m) for m in (section, call_open) if m) if i >= 0]
        if not found:
            return None
        first = min(found)
        calls: list[Call] = []
        for piece in rest[first:].split(call_open)[1:]:
            sep = piece.find(name_close)
            if sep < 0:
                break
            calls.append((name_of(piece[:sep]), _json_args(piece[sep + len(name_close) :])))
        return rest[:first], calls

    return read


def _kimi_name(raw: str) -> str:
    """``functions.get_weather:0`` -> ``get_weather`` (Kimi K2 writes the call's id as its name)."""
    name = raw.strip().removeprefix("functions.")
    return name.rsplit(":", 1)[0] if ":" in name else name


_DS_CALL, _DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>"  # noqa: RUF001 (DeepSeek's own full-width bars)
_DS_SECTION = "<｜tool▁calls▁begin｜>"  # noqa: RUF001


def deepseek(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    """DeepSeek V3.1: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>``; R1 (and its
    distills): ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{json}```...``."""  # noqa: RUF002
    starts = [i for i in (rest.find(_DS_SECTION), rest.find(_DS_CALL)) if i >= 0]
    if not starts:
        return None
    first = min(starts)
    calls: list[Call] = []
    for piece in rest[first:].split(_DS_CALL)[1:]:
        sep = piece.find(_DS_SEP)
        if sep < 0:
            break
        name, after = piece[:sep].strip(), piece[sep + len(_DS_SEP) :]
        if name == "function":  # R1: the name is on the line after the separator, then a ```json fence
            line_end = after.find("\n")
            if line_end < 0:
                break
            name, after = after[:line_end].strip(), after[line_end + 1 :].removeprefix("```json").lstrip("\n")
        calls.append((name, _json_args(after)))
    return rest[:first], calls


def apertus(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    """``<|tools_prefix|>[{"NAME": {args}}, ...]<|tools_suffix|>``."""
    at = rest.find("<|tools_prefix|>")
    if at < 0:
        return None
    body, calls, i = rest[at + len("<|tools_prefix|>") :], [], 0
    pattern = re.compile(r'\{\s*"((?:[^"\\]|\\.)*)"\s*:\s*')
    while (m := pattern.search(body, i)) is not None:
        end, done = scan_value(body, m.end())
        calls.append((json.loads(f'"{m.group(1)}"'), body[m.end() : end]))
        if not done:
            break
        i = end
    return rest[:at], calls


_RECIPIENT = re.compile(r"[\w.-]+")


def _v3_2_segments(rest: str) -> list[tuple[str | None, str]]:
    """Functionary v3.2's messages ``(recipient, body)``; recipient None: still being written."""
    out: list[tuple[str | None, str]] = []
    for i, segment in enumerate(rest.split(">>>")):
        if i == 0 and not segment:
            continue
        head, newline, body = segment.partition("\n")
        out.append((head.strip(), body) if newline else (None, segment))
    return out


def functionary_v3_2(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    """Functionary v3.2: the generation prompt ends with ``>>>``; each message is ``RECIPIENT\\n...``,
    ``all`` being the user, anything else a function given JSON arguments; more follow ``>>>``."""
    content, calls = "", []
    for recipient, body in _v3_2_segments(rest):
        if recipient is None:
            break
        if recipient == "all":
            content += body
        elif _RECIPIENT.fullmatch(recipient):
            calls.append((recipient, _json_args(body)))
        else:
            return None  # no recipient: a plain answer
    return (content, calls) if calls else None


def functionary_v3_2_content(rest: str, final: bool) -> str:
    """Functionary v3.2's text when it calls nothing: the ``all`` messages' bodies."""
    segments = _v3_2_segments(rest)
    if segments and segments[0][0] not in (None, "all") and not _RECIPIENT.fullmatch(segments[0][0] or ""):
        return rest  # no recipient: a plain answer
    out = []
    for recipient, body in segments:
        if recipient == "all":
            out.append(body)
        elif recipient is None and final and body.strip() != "all":
            out.append(body)  # the last message, cut short without a newline
    return "".join(out)


# XML parameters: Qwen3-Coder and Seed-OSS (<function=NAME><parameter=K>V</parameter></function>),
# GLM (<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>),
# MiniMax-M2 (<invoke name="NAME"><parameter name="K">V</parameter></invoke>).


@dataclass(frozen=True)
class _Xml:
    call_open: re.Pattern[str]  # group 1: the name
    call_close: str
    param: re.Pattern[str]  # group 1: the key, the value follows
    param_close: str
    trim_newlines: bool  # Qwen3-Coder writes a value on its own lines: one newline each side is markup


def _typed(raw: str, schema: Any) -> Any:  # Any: a JSON value, from a JSON schema
    """A parameter's raw text as the JSON value its schema says (strings stay text; else JSON, else text)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string":
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _xml_args(body: str, spec: _Xml, props: Mapping[str, Any], closed: bool) -> str:
    """The JSON arguments of one call so far: every whole parameter, and ``}`` once the call is closed."""
    parts = []
    i = 0
    while (m := spec.param.search(body, i)) is not None:
        end = body.find(spec.param_close, m.end())
        if end < 0:
            break
        raw = body[m.end() : end]
        if spec.trim_newlines:
            raw = raw.removeprefix("\n").removesuffix("\n")
        value = _typed(raw, props.get(m.group(1)))
        parts.append(f"{json.dumps(m.group(1), ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}")
        i = end + len(spec.param_close)
    return "{" + ", ".join(parts) + ("}" if closed else "")


def xml_calls(spec: _Xml, content_ends: tuple[str, ...]) -> Reader:
    """Calls with XML parameters; content ends at the first of ``content_ends`` (the section's opening)."""

    def read(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
        found = [i for i in (rest.find(m) for m in content_ends) if i >= 0]
        if not found:
            return None
        first = min(found)
        calls: list[Call] = []
        i = first
        while (m := spec.call_open.search(rest, i)) is not None:
            name = m.group(1).strip()
            close = rest.find(spec.call_close, m.end())
            body = rest[m.end() : close if close >= 0 else len(rest)]
            props = (types.get(name) or {}).get("properties") or {}
            calls.append((name, _xml_args(body, spec, props, close >= 0)))
            if close < 0:
                break
            i = close + len(spec.call_close)
        return rest[:first], calls

    return read


_QWEN3_CODER = _Xml(re.compile(r"<function=([^>\n]+)>"), "</function>", re.compile(r"<parameter=([^>\n]+)>"),
                    "</parameter>", trim_newlines=True)  # fmt: skip
_SEED = _Xml(_QWEN3_CODER.call_open, "</function>", _QWEN3_CODER.param, "</parameter>", trim_newlines=False)
_GLM = _Xml(re.compile(r"<tool_call>([^<\n]+)(?=[\n<])"), "</tool_call>", re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>"),
            "</arg_value>", trim_newlines=False)  # fmt: skip
_MINIMAX = _Xml(re.compile(r'<invoke name="([^"]+)">'), "</invoke>", re.compile(r'<parameter name="([^"]+)">'),
                "</parameter>", trim_newlines=False)  # fmt: skip


def _py_value(node: ast.expr) -> Any:  # Any: a JSON value
    """A Python-literal argument (LFM2's calls) as JSON: ``True``/``true``, ``None``/``null``, lists, dicts."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null", "True", "False", "None"):
        return {"true": True, "True": True, "false": False, "False": False}.get(node.id)
    if isinstance(node, ast.List | ast.Tuple):
        return [_py_value(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_py_value(k): _py_value(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_py_value(node.operand)
    raise ValueError("not a literal")


def lfm2(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    """``<|tool_call_start|>[name(key=value, ...), ...]<|tool_call_end|>`` with Python literals; a call
    list is read when it is whole (its arguments cannot be cut into growing JSON before)."""
    at = rest.find("<|tool_call_start|>")
    if at < 0:
        return None
    calls: list[Call] = []
    for block in rest[at:].split("<|tool_call_start|>")[1:]:
        text, closed, _ = block.partition("<|tool_call_end|>")
        if not closed and not final:
            break
        try:
            tree = ast.parse(text.strip(), mode="eval").body
            items = tree.elts if isinstance(tree, ast.List) else [tree]
            for item in items:
                if not isinstance(item, ast.Call):
                    raise ValueError("not a call")
                args = {kw.arg: _py_value(kw.value) for kw in item.keywords if kw.arg}
                calls.append((ast.unparse(item.func), json.dumps(args, ensure_ascii=False)))
        except (SyntaxError, ValueError):
            break
    return rest[:at], calls


# --- GPT-OSS (harmony) --------------------------------------------------------------------------------

_HARMONY_HEADER = re.compile(r"(?:<\|start\|>)?(?:assistant)?(.*?)<\|message\|>", re.DOTALL)
_HARMONY_ENDS = ("<|end|>", "<|call|>", "<|return|>")
HARMONY_MARKERS = ("<|channel|>", "<|message|>", "<|start|>", *_HARMONY_ENDS)


def harmony(text: str, final: bool) -> tuple[str, str, list[Call]]:
    """GPT-OSS's channels: ``analysis`` is reasoning, ``final`` (and plain ``commentary``) content,
    a message to ``functions.NAME`` (in the role or the channel header) a call with JSON arguments.
    ``(reasoning, content, calls)``; a header still being written is held back."""
    reasoning, content, calls = "", "", []
    i = 0
    while i < len(text):
        m = _HARMONY_HEADER.match(text, i)
        if m is None:
            if final and not text[i:].lstrip().startswith(("<|channel|>", "<|start|>", " to=")):
                content += text[i:]  # no header at all: a plain answer
            break
        header = m.group(1)
        ends = [(text.find(e, m.end()), e) for e in _HARMONY_ENDS]
        end, marker = min(((at, e) for at, e in ends if at >= 0), default=(-1, ""))
        body = text[m.end() : end if end >= 0 else len(text)]
        if end < 0 and not final:
            body = body[: len(body) - held(body, _HARMONY_ENDS)]
        recipient = re.search(r"to=functions\.([^\s<]+)", header)
        if recipient:
            calls.append((recipient.group(1), _json_args(body)))
        elif "<|channel|>analysis" in header:
            reasoning += body
        else:
            content += body
        if end < 0:
            break
        i = end + len(marker)
    return reasoning, content, calls


def held(text: str, markers: tuple[str, ...]) -> int:
    """How many trailing characters of ``text`` could be the start of a marker (kept back)."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:n]):
                best = max(best, n)
                break
    return best


# --- The families ---------------------------------------------------------------------------------------


def _no_calls(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    return None


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("gpt-oss", _no_calls, think=()),  # read by harmony()
        Family("functionary-v3.2", functionary_v3_2, starts=(">>>",), content=functionary_v3_2_content),
        Family("kimi-k2", tagged("<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                                 "<|tool_calls_section_begin|>", _kimi_name),
               starts=("<|tool_calls_section_begin|>", "<|tool_call_begin|>")),  # fmt: skip
        Family("lfm2", lfm2, starts=("<|tool_call_start|>",)),
        Family("deepseek", deepseek, starts=(_DS_SECTION, _DS_CALL)),
        Family("minimax-m2", xml_calls(_MINIMAX, ("<minimax:tool_call>", "<invoke name=")),
               starts=("<minimax:tool_call>", "<invoke name=")),  # fmt: skip
        Family("seed-oss", xml_calls(_SEED, ("<seed:tool_call>", "<function=")),
               starts=("<seed:tool_call>", "<function="), think=(("<seed:think>", "</seed:think>"),)),  # fmt: skip
        Family("qwen3-coder", xml_calls(_QWEN3_CODER, ("<tool_call>", "<function=")),
               starts=("<tool_call>", "<function=")),  # fmt: skip
        Family("glm", xml_calls(_GLM, ("<tool_call>",)), starts=("<tool_call>",)),
        Family("command-r7b", json_list("<|START_ACTION|>", "tool_name", ("parameters",)),
               starts=("<|START_ACTION|>",), think=(("<|START_THINKING|>", "<|END_THINKING|>"),),
               strip=("<|START_RESPONSE|>", "<|END_RESPONSE|>")),  # fmt: skip
        Family("apertus", apertus, starts=("<|tools_prefix|>",), think=(("<|inner_prefix|>", "<|inner_suffix|>"),)),
        Family("nemotron-v2", json_list("<TOOLCALL>"), starts=("<TOOLCALL>",)),
        Family("apriel", json_list("<tool_calls>"), starts=("<tool_calls>",)),
        Family("firefunction-v2", json_list("functools"), starts=("functools",)),
        Family("functionary-v3.1", tagged("<function=", ">"), starts=("<function=",)),
        Family("granite", json_list("<|tool_call|>", arg_keys=("arguments", "parameters")), starts=("<|tool_call|>",)),
        Family("hermes", hermes, starts=("<tool_call>",)),
        Family("mistral", mistral, starts=("[TOOL_CALLS]",), think=(("[THINK]", "[/THINK]"), THINK)),
        Family("llama3", _no_calls),  # bare JSON: read in _chat_parse, where a partial one is held
        Family("generic", _no_calls),
    )
}


def family_of(template: str) -> str:
    """The family of a chat template, from the markers its text writes (see the module docstring)."""
    t = template
    checks: tuple[tuple[str, bool], ...] = (
        ("gpt-oss", "<|channel|>" in t),
        ("functionary-v3.2", ">>>all" in t),
        ("kimi-k2", "<|tool_calls_section_begin|>" in t and "<|tool_call_begin|>" in t),
        ("lfm2", "<|tool_list_start|>" in t or "List of tools: [" in t),
        ("deepseek", _DS_SECTION in t or _DS_CALL in t),
        ("minimax-m2", "<minimax:tool_call>" in t or ("<invoke name=" in t and "]~b]" in t)),
        ("seed-oss", "<seed:tool_call>" in t),
        ("qwen3-coder", "<tool_call>" in t and "<function=" in t and "<parameter=" in t),
        ("glm", "<arg_key>" in t and "<arg_value>" in t),
        ("command-r7b", "<|START_ACTION|>" in t),
        ("apertus", "<|tools_prefix|>" in t),
        ("nemotron-v2", "<TOOLCALL>" in t),
        ("apriel", "<tool_calls>" in t),
        ("firefunction-v2", "functools" in t),
        ("functionary-v3.1", "<function=" in t),
        ("granite", "<|tool_call|>" in t),
        ("hermes", "<tool_call>" in t),
        ("mistral", "[TOOL_CALLS]" in t),
        ("llama3", "<|python_tag|>" in t or "ipython" in t),
    )
    return next((name for name, hit in checks if hit), "generic")
