"""Generate ``service/llamacpp/upstream_args.py``: llama-server's options, read from llama.cpp's ``common/arg.cpp``.

    python -m devtools.extract_llama_args [--source DIR] [--output service/llamacpp/upstream_args.py] [--check]

Why generated: modelrouter must accept exactly the flags llama-server
accepts (an unknown one is a usage error there too), with their env names and
preset keys. llama.cpp declares them in one 4,700-line C++ function; reading
that by hand would drift with every llama.cpp update. This script walks the
``add_opt(common_arg(...).set_xxx(...))`` calls with a small C++ tokenizer
(string and char literals, comments, balanced brackets) and keeps the options
llama-server sees: ``LLAMA_EXAMPLE_SERVER`` or ``LLAMA_EXAMPLE_COMMON`` among
the examples and ``LLAMA_EXAMPLE_SERVER`` not excluded, plus the preset-only
keys of ``common_params_add_preset_options``. Where llama.cpp declares one
option twice (``-np`` has a server and a generic variant), the first wins, as
in the server's own parser.

How each option is *handled* by modelrouter is not generated: that decision
lives in ``service/llamacpp/flags.py``, and a test fails when an option here
has no decision there. ``--check`` exits 1 when the committed module differs
from a fresh extraction (default source: llama-cpp-python's vendored tree).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from devtools import llama_build

DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "service" / "llamacpp" / "upstream_args.py"
_NAMED_EXAMPLE_SETS = {"mmproj_examples": ("mtmd", "server", "cli", "tts")}
_PRINTF = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?(?:l|ll|z|h)?[diufeEgGxXscp]")


@dataclass
class Option:
    """One ``common_arg`` as declared (before filtering)."""

    names: tuple[str, ...]
    negations: tuple[str, ...] = ()
    kind: str = "flag"
    value_hint: str = ""
    env: str | None = None
    help: str = ""
    examples: tuple[str, ...] = ("common",)
    excludes: tuple[str, ...] = ()
    sampling: bool = False
    speculative: bool = False
    preset_only: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def for_server(self) -> bool:
        return ("server" in self.examples or "common" in self.examples) and "server" not in self.excludes


# --- a tiny C++ reader --------------------------------------------------------


def _skip_literal(text: str, i: int) -> int:
    """Index just after the string or char literal starting at ``text[i]``."""
    quote = text[i]
    i += 1
    while text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _skip_comment(text: str, i: int) -> int:
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    return text.index("*/", i + 2) + 2


def _matching(text: str, i: int) -> int:
    """Index of the bracket closing the one at ``text[i]``."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[text[i]]]
    i += 1
    while stack:
        c = text[i]
        if c in "\"'":
            i = _skip_literal(text, i)
            continue
        if text.startswith(("//", "/*"), i):
            i = _skip_comment(text, i)
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")}]" and c != stack.pop():
            msg = f"unbalanced {c!r} at offset {i}"
            raise ValueError(msg)
        i += 1
    return i - 1


def _split_top(text: str) -> list[str]:
    """Split an argument list on its top-level commas."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = _skip_literal(text, i)
            continue
        if text.startswith(("//", "/*"), i):
            i = _skip_comment(text, i)
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _literals(text: str) -> list[str]:
    """The string literals in ``text``, escapes decoded, adjacent ones kept apart."""
    found, i = [], 0
    while i < len(text):
        if text[i] == '"':
            end = _skip_literal(text, i)
            found.append(text[i + 1 : end - 1].encode().decode("unicode_escape"))
            i = end
        elif text[i] == "'":
            i = _skip_literal(text, i)
        else:
            i += 1
    return found


def _first_string(expr: str) -> str:
    """The text of the first run of adjacent string literals in a C++ expression."""
    run: list[str] = []
    i = 0
    while i < len(expr):
        if expr[i] == '"':
            end = _skip_literal(expr, i)
            run.append(expr[i + 1 : end - 1].encode().decode("unicode_escape"))
            i = end
            continue
        if run and not expr[i].isspace():
            break
        i += 1
    return "".join(run)


# --- options -----------------------------------------------------------------


_EXAMPLE_TERNARY = re.compile(r'ex\s*==\s*LLAMA_EXAMPLE_\w+\s*\?\s*"(?:[^"\\]|\\.)*"(?:\s*"(?:[^"\\]|\\.)*")*\s*:')


def _help_line(expr: str) -> str:
    # "ex == LLAMA_EXAMPLE_X ? a : b": b is what llama-server prints.
    expr = _EXAMPLE_TERNARY.sub("", expr, count=1)
    text = _PRINTF.sub("…", _first_string(expr)).replace("%%", "%")
    return " ".join(text.strip().split("\n")[0].split())


def _kind(args: list[str]) -> tuple[str, str, str]:
    """(kind, value hint, help expression) from the constructor's arguments after the names."""
    if args[1].startswith("{"):
        return "bool", "", args[2]
    if len(args) == 3:
        return "flag", "", args[1]
    if len(args) == 5:
        return "pair", " ".join(_literals(args[1]) + _literals(args[2])), args[3]
    handler = args[3]
    kind = "int" if re.search(r"common_params\s*&\s*\w*\s*,\s*int\b", handler) else "string"
    hint = _literals(args[1])
    return kind, hint[0] if hint else "", args[2]


def _examples(arg: str) -> tuple[str, ...]:
    arg = arg.strip()
    if arg in _NAMED_EXAMPLE_SETS:
        return _NAMED_EXAMPLE_SETS[arg]
    names = re.findall(r"LLAMA_EXAMPLE_([A-Z_]+)", arg)
    return tuple(n.lower() for n in names)


def _apply_chain(option: Option, chain: str) -> None:
    for method, raw in re.findall(r"\.(\w+)\(((?:[^()]|\([^()]*\))*)\)", chain):
        if method == "set_examples":
            option.examples = _examples(raw)
        elif method == "set_excludes":
            option.excludes = _examples(raw)
        elif method == "set_env":
            literal = _literals(raw)
            option.env = literal[0] if literal else raw.strip()
        elif method == "set_sampling":
            option.sampling = True
        elif method == "set_spec":
            option.speculative = True
        elif method == "set_preset_only":
            option.preset_only = True


_PRESET_ENVS = {
    "COMMON_ARG_PRESET_LOAD_ON_STARTUP": "__PRESET_LOAD_ON_STARTUP",
    "COMMON_ARG_PRESET_STOP_TIMEOUT": "__PRESET_STOP_TIMEOUT",
    "COMMON_ARG_PRESET_DEDUP_CACHE_MODELS": "__PRESET_DEDUP_CACHE_MODELS",
}


def _option(call: str) -> Option:
    """Parse ``common_arg(...)`` followed by its ``.set_xxx(...)`` chain."""
    open_at = call.index("(")
    close_at = _matching(call, open_at)
    args = _split_top(call[open_at + 1 : close_at])
    kind, hint, help_expr = _kind(args)
    option = Option(
        names=tuple(_literals(args[0])),
        negations=tuple(_literals(args[1])) if kind == "bool" else (),
        kind=kind,
        value_hint=hint,
        help=_help_line(help_expr),
    )
    _apply_chain(option, call[close_at + 1 :])
    if option.env in _PRESET_ENVS:
        option.env = _PRESET_ENVS[option.env]
    return option


def _calls(text: str, marker: str) -> list[str]:
    """The argument text of every ``marker(...)`` call (``add_opt`` or ``args.push_back``)."""
    calls, i = [], 0
    while (i := text.find(marker + "(", i)) >= 0:
        open_at = i + len(marker)
        close_at = _matching(text, open_at)
        calls.append(text[open_at + 1 : close_at].strip())
        i = close_at
    return calls


def _without_comments(text: str) -> str:
    """``text`` with its comments removed (string literals kept intact)."""
    out, i, start = [], 0, 0
    while i < len(text):
        if text[i] in "\"'":
            i = _skip_literal(text, i)
        elif text.startswith(("//", "/*"), i):
            out.append(text[start:i])
            i = start = _skip_comment(text, i)
        else:
            i += 1
    out.append(text[start:])
    return "".join(out)


def extract(arg_cpp: str) -> list[Option]:
    """Every option llama-server accepts, in declaration order, the first declaration winning."""
    arg_cpp = _without_comments(arg_cpp)
    body_start = arg_cpp.index("common_params_context common_params_parser_init(")
    preset_start = arg_cpp.index("void common_params_add_preset_options(")
    options = [_option(c) for c in _calls(arg_cpp[body_start:preset_start], "add_opt")]
    options += [_option(c) for c in _calls(arg_cpp[preset_start:], "args.push_back")]
    seen: set[tuple[str, ...]] = set()
    kept = []
    for option in options:
        if option.for_server and option.names not in seen:
            seen.add(option.names)
            kept.append(option)
    return kept


# --- output ------------------------------------------------------------------

_HEADER = '''# ruff: noqa: E501  (generated data: one option per line)
"""llama-server's options, generated from llama.cpp's ``common/arg.cpp``: DO NOT EDIT.

Regenerate with ``python -m devtools.extract_llama_args`` (``--check`` verifies).
Source: {source}.

Every option llama-server accepts (``LLAMA_EXAMPLE_SERVER`` or ``_COMMON``,
not excluded from the server), plus the preset-only keys. How modelrouter
handles each one is decided in :mod:`service.llamacpp.flags`, not here.
Longer than the house's 400 lines because it is data, one record per option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ValueKind = Literal["flag", "bool", "int", "string", "pair"]
"""``flag``: no value (``--metrics``); ``bool``: a flag with a ``--no-`` twin;
``int``/``string``: one value; ``pair``: two values."""


@dataclass(frozen=True, slots=True)
class LlamaArg:
    """One llama-server option as llama.cpp declares it."""

    names: tuple[str, ...]
    """Spellings that set it (``-c``, ``--ctx-size``); the last is llama.cpp's main one."""
    negations: tuple[str, ...]
    """Spellings that unset a ``bool`` (``--no-jinja``)."""
    kind: ValueKind
    value_hint: str
    env: str | None
    """Its environment variable (``LLAMA_ARG_CTX_SIZE``); ``__PRESET_*`` for preset-only keys."""
    help: str
    """The first line of llama.cpp's help, ``…`` where it prints a default."""
    server_specific: bool
    """Declared for the server itself (not inherited from the common options)."""
    sampling: bool
    speculative: bool
    preset_only: bool
    """A key of preset files only (``load-on-startup``), never a command-line flag."""

    @property
    def key(self) -> str:
        """llama.cpp's canonical name: the last spelling without dashes (``ctx-size``)."""
        return self.names[-1].lstrip("-")


SOURCE = {source_literal}

# fmt: off
LLAMA_ARGS: tuple[LlamaArg, ...] = (
'''


def _literal(value: object) -> str:
    """A Python literal in the house's quote style (double quotes), stable under ruff format."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def render(options: list[Option], source: str) -> str:
    """The Python module text for ``options``."""
    lines = [_HEADER.format(source=source, source_literal=_literal(source))]
    for o in options:
        fields = [
            o.names,
            o.negations,
            o.kind,
            o.value_hint,
            o.env,
            o.help,
            "server" in o.examples,
            o.sampling,
            o.speculative,
            o.preset_only,
        ]
        lines.append(f"    LlamaArg({', '.join(_literal(f) for f in fields)}),\n")
    lines.append(")\n# fmt: on\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.extract_llama_args", description=__doc__.split("\n")[0])
    default_source = "the pinned llama-cpp-python's, unpacked by devtools.llama_build"
    parser.add_argument("--source", type=Path, default=None, help=f"llama.cpp source tree (default: {default_source})")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --output is not up to date")
    args = parser.parse_args(argv)
    source = args.source or llama_build.vendored_llama_cpp()
    arg_cpp = (source / "common" / "arg.cpp").read_text()
    label = f"llama.cpp as vendored by llama-cpp-python {llama_build.pinned_version()}, common/arg.cpp"
    text = render(extract(arg_cpp), label)
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python -m devtools.extract_llama_args", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
