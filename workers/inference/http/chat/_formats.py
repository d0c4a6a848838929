"""The chat-template families llama.cpp knows, and how each one's tool calls read (pure functions).

llama.cpp (``common/chat.cpp``) recognises a family from the text of the chat
template -- a dedicated handler for templates it names
(``common_chat_try_specialized_template``: GPT-OSS, Functionary v3.2, Kimi
K2, LFM2, DeepSeek V3.2/V4, Qwen3-Coder, Ministral/Magistral, ...), and a "differential
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
(Qwen3-Coder, GLM, MiniMax-M2, Seed-OSS, DeepSeek's DSML) join the JSON object as they are
written when the tool's schema says they are strings, else once whole (their
JSON type is known only then); a call appears once its name is complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from workers.inference.http.chat._markup import (
    DEEPSEEK_DSML,
    DSML,
    GLM,
    MINIMAX,
    QWEN3_CODER,
    SEED,
    Call,
    Reader,
    Types,
    calls_in,
    gemma4,
    json_args,
    lfm2,
    scan_value,
    xml_calls,
)

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


# --- Readers ------------------------------------------------------------------------------------------


def json_list(marker: str, name_key: str = "name", arg_keys: tuple[str, ...] = ("arguments",)) -> Reader:
    """``<marker>[{"name": ..., "arguments": {...}}, ...]``: Nemotron v2, Apriel, FireFunction, Granite,
    Command R7B (``tool_name``, ``parameters``)."""

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
        calls.append((name, json_args(piece[args_at + len("[ARGS]") :])))
    return rest[:at], calls


def tagged(
    call_open: str, name_close: str, section: str | None = None, name_of: Callable[[str], str] = str.strip
) -> Reader:
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
            calls.append((name_of(piece[:sep]), json_args(piece[sep + len(name_close) :])))
        return rest[:first], calls

    return read


def _kimi_name(raw: str) -> str:
    """``functions.get_weather:0`` -> ``get_weather`` (Kimi K2 writes the call's id as its name)."""
    name = raw.strip().removeprefix("functions.")
    return name.rsplit(":", 1)[0] if ":" in name else name


# DeepSeek's markers, with its own full-width bars
DS_SECTION = "<｜tool▁calls▁begin｜>"  # noqa: RUF001
DS_CALL = "<｜tool▁call▁begin｜>"  # noqa: RUF001
DS_SEP = "<｜tool▁sep｜>"  # noqa: RUF001
DS_CALL_END = "<｜tool▁call▁end｜>"  # noqa: RUF001
DS_SECTION_END = "<｜tool▁calls▁end｜>"  # noqa: RUF001


def deepseek(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    """DeepSeek V3.1: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>``; R1 (and its
    distills): ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{json}```...``."""  # noqa: RUF002
    starts = [i for i in (rest.find(DS_SECTION), rest.find(DS_CALL)) if i >= 0]
    if not starts:
        return None
    first = min(starts)
    calls: list[Call] = []
    for piece in rest[first:].split(DS_CALL)[1:]:
        sep = piece.find(DS_SEP)
        if sep < 0:
            break
        name, after = piece[:sep].strip(), piece[sep + len(DS_SEP) :]
        if name == "function":  # R1: the name is on the line after the separator, then a ```json fence
            line_end = after.find("\n")
            if line_end < 0:
                break
            name, after = after[:line_end].strip(), after[line_end + 1 :].removeprefix("```json").lstrip("\n")
        calls.append((name, json_args(after)))
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
            calls.append((recipient, json_args(body)))
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


# --- The families ---------------------------------------------------------------------------------------


def _no_calls(rest: str, final: bool, types: Types) -> tuple[str, list[Call]] | None:
    return None


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("gpt-oss", _no_calls, think=()),  # read by harmony()
        Family("functionary-v3.2", functionary_v3_2, starts=(">>>",), content=functionary_v3_2_content),
        Family(
            "kimi-k2",
            tagged("<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_calls_section_begin|>", _kimi_name),
            starts=("<|tool_calls_section_begin|>", "<|tool_call_begin|>"),
        ),
        Family("lfm2", lfm2, starts=("<|tool_call_start|>",)),
        Family(
            "gemma4",
            gemma4,
            starts=("<|tool_call>",),
            think=(("<|channel>thought\n", "<channel|>"), ("<|channel>thought", "<channel|>")),
            strip=("<channel|>",),
        ),
        Family(
            "deepseek-dsml",
            xml_calls(DEEPSEEK_DSML, (f"<{DSML}function_calls>", f"<{DSML}tool_calls>", f"<{DSML}invoke")),
            starts=(f"<{DSML}function_calls>", f"<{DSML}tool_calls>", f"<{DSML}invoke"),
        ),
        Family("deepseek", deepseek, starts=(DS_SECTION, DS_CALL)),
        Family(
            "minimax-m2",
            xml_calls(MINIMAX, ("<minimax:tool_call>", "<invoke name=")),
            starts=("<minimax:tool_call>", "<invoke name="),
        ),
        Family(
            "seed-oss",
            xml_calls(SEED, ("<seed:tool_call>", "<function=")),
            starts=("<seed:tool_call>", "<function="),
            think=(("<seed:think>", "</seed:think>"),),
        ),
        Family(
            "qwen3-coder", xml_calls(QWEN3_CODER, ("<tool_call>", "<function=")), starts=("<tool_call>", "<function=")
        ),
        Family("glm", xml_calls(GLM, ("<tool_call>",)), starts=("<tool_call>",)),
        Family(
            "command-r7b",
            json_list("<|START_ACTION|>", "tool_name", ("parameters",)),
            starts=("<|START_ACTION|>",),
            think=(("<|START_THINKING|>", "<|END_THINKING|>"),),
            strip=("<|START_RESPONSE|>", "<|END_RESPONSE|>"),
        ),
        Family(
            "command-r-plus",
            json_list("Action:", "tool_name", ("parameters",)),
            starts=("Action:",),
            strip=("<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"),
        ),
        Family("apertus", apertus, starts=("<|tools_prefix|>",), think=(("<|inner_prefix|>", "<|inner_suffix|>"),)),
        Family("nemotron-v2", json_list("<TOOLCALL>"), starts=("<TOOLCALL>",)),
        Family("apriel", json_list("<tool_calls>"), starts=("<tool_calls>",)),
        Family("firefunction-v2", json_list("functools"), starts=("functools",)),
        Family("functionary-v3.1", tagged("<function=", ">"), starts=("<function=",)),
        Family("granite", json_list("<|tool_call|>", arg_keys=("arguments", "parameters")), starts=("<|tool_call|>",)),
        Family("hermes", hermes, starts=("<tool_call>",)),
        Family("mistral", mistral, starts=("[TOOL_CALLS]",), think=(("[THINK]", "[/THINK]"), THINK)),
        Family("llama3", _no_calls),  # bare JSON: read in _parse, where a partial one is held
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
        ("gemma4", "'<|tool_call>call:'" in t),
        ("deepseek-dsml", "dsml_token" in t and "DSML" in t and ("function_calls" in t or "tool_calls" in t)),
        ("deepseek", DS_SECTION in t or DS_CALL in t),
        ("minimax-m2", "<minimax:tool_call>" in t or ("<invoke name=" in t and "]~b]" in t)),
        ("seed-oss", "<seed:tool_call>" in t),
        ("qwen3-coder", "<tool_call>" in t and "<function=" in t and "<parameter=" in t),
        ("glm", "<arg_key>" in t and "<arg_value>" in t),
        ("command-r7b", "<|START_ACTION|>" in t),
        ("command-r-plus", "<|CHATBOT_TOKEN|>" in t and "Action:\\n```json" in t),
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
