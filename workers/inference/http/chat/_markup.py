"""The building blocks of the tool-call syntaxes (pure functions): JSON cut where the model has
written it, XML parameters (Qwen3-Coder, Seed-OSS, GLM, MiniMax-M2, DeepSeek's DSML), Python-call
literals (LFM2) and GPT-OSS's harmony channels.

Everything here reads a partial output as well as a whole one, so that its
result only grows as tokens arrive (see :mod:`workers.inference.http.chat._formats`).
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


def json_args(text: str) -> str:
    """The JSON value at the start of ``text`` (whitespace skipped), as far as it is written."""
    at = len(text) - len(text.lstrip())
    if not text.startswith(("{", "["), at):
        return ""  # not started yet (or a fence still being written)
    end, _ = scan_value(text, at)
    return text[at:end]


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


# Any: ``props`` are a tool's parameters JSON schema ``properties``, as the client sent them
def _xml_args(body: str, spec: _Xml, props: Mapping[str, Any], closed: bool, final: bool) -> str:
    """The JSON arguments of one call so far: every whole parameter, then the text so far of a
    ``string`` one still being written (so long code streams as it is written; held back: what may
    be the start of its closing tag, and with ``trim_newlines`` a trailing newline), and ``}`` once
    the call is closed. Other parameters join when whole: their JSON type is known only then."""
    parts = []
    i = 0
    while (m := spec.param.search(body, i)) is not None:
        key = json.dumps(m.group(1), ensure_ascii=False)
        end = body.find(spec.param_close, m.end())
        schema = props.get(m.group(1))
        if m.re.groups > 1 and m.group(2):  # DSML says it: string="true" is text, "false" JSON
            schema = {"type": "string" if m.group(2) == "true" else "json"}
        if end < 0:
            if isinstance(schema, dict) and schema.get("type") == "string":
                raw = body[m.end() :]
                raw = raw[: len(raw) - (0 if final else held(raw, (spec.param_close,)))]
                if spec.trim_newlines:
                    raw = raw.removeprefix("\n") if len(raw) > 1 or final else ""
                    raw = raw if final else raw.rstrip("\n")
                parts.append(f"{key}: {json.dumps(raw, ensure_ascii=False)[:-1]}")
            break
        raw = body[m.end() : end]
        if spec.trim_newlines:
            raw = raw.removeprefix("\n").removesuffix("\n")
        value = _typed(raw, schema)
        parts.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
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
            calls.append((name, _xml_args(body, spec, props, close >= 0, final)))
            if close < 0:
                break
            i = close + len(spec.call_close)
        return rest[:first], calls

    return read


QWEN3_CODER = _Xml(
    re.compile(r"<function=([^>\n]+)>"),
    "</function>",
    re.compile(r"<parameter=([^>\n]+)>"),
    "</parameter>",
    trim_newlines=True,
)
SEED = _Xml(QWEN3_CODER.call_open, "</function>", QWEN3_CODER.param, "</parameter>", trim_newlines=False)
GLM = _Xml(
    re.compile(r"<tool_call>([^<\n]+)(?=[\n<])"),
    "</tool_call>",
    re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>"),
    "</arg_value>",
    trim_newlines=False,
)
MINIMAX = _Xml(
    re.compile(r'<invoke name="([^"]+)">'),
    "</invoke>",
    re.compile(r'<parameter name="([^"]+)">'),
    "</parameter>",
    trim_newlines=False,
)
DSML = "｜DSML｜"  # noqa: RUF001 (DeepSeek V3.2/V4's full-width bars)
# DeepSeek V3.2/V4: <DSML invoke name="N"><DSML parameter name="K" string="true|false">V</DSML parameter>...
DEEPSEEK_DSML = _Xml(
    re.compile(f'<{DSML}invoke name="([^"]+)">'),
    f"</{DSML}invoke>",
    re.compile(f'<{DSML}parameter name="([^"]+)"(?: string="(true|false)")?>'),
    f"</{DSML}parameter>",
    trim_newlines=False,
)


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


# --- Gemma 4 ---------------------------------------------------------------------------------------------

GEMMA_QUOTE = '<|"|>'  # Gemma 4 delimits strings with this token, and leaves keys bare
_GEMMA_BARE = re.compile(r"[A-Za-z_][\w.-]*|-?[0-9][0-9eE.+-]*")


def gemma_args(text: str, final: bool) -> tuple[str, bool]:
    """Gemma 4's ``{key:<|"|>text<|"|>,n:3,list:[...]}`` as JSON text, as far as it is written
    (a bare word or a quote token still being written is held back); and whether it closed."""
    out: list[str] = []
    depth, i, in_str = 0, 0, False
    while i < len(text):
        if text.startswith(GEMMA_QUOTE, i):
            out.append('"')
            in_str, i = not in_str, i + len(GEMMA_QUOTE)
            continue
        if not final and GEMMA_QUOTE.startswith(text[i:]):
            break  # maybe the quote token, half-written
        c = text[i]
        if in_str:
            out.append(json.dumps(c, ensure_ascii=False)[1:-1])
            i += 1
            continue
        word = _GEMMA_BARE.match(text, i)
        if word is not None:
            end = word.end()
            if end == len(text) and not final:
                break  # the word may go on
            token = word.group()
            is_key = text.startswith(":", end)
            out.append(json.dumps(token) if is_key else token)
            i = end
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        if not c.isspace() or depth:
            out.append(c)
        i += 1
        if depth == 0 and c == "}":
            return "".join(out), True
    return "".join(out), False


def gemma4(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    """``<|tool_call>call:NAME{...}<tool_call|>``, repeated (Gemma 4)."""
    at = rest.find("<|tool_call>")
    if at < 0:
        return None
    calls: list[Call] = []
    for piece in rest[at:].split("<|tool_call>")[1:]:
        head, brace, args = piece.removeprefix("call:").partition("{")
        if not brace:
            break  # the name is not complete yet
        text, closed = gemma_args("{" + args.split("<tool_call|>", 1)[0], final)
        calls.append((head.strip(), text))
        if not closed:
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
            calls.append((recipient.group(1), json_args(body)))
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
