"""llama-server's command line on ``modelrouter serve``: every option, grouped as in the help.

Each option of :data:`service.llamacpp.flags.ARGS` is registered under all its
spellings, so a llama-server command line parses unchanged and anything
llama-server would not know is a usage error. Values are kept as llama.cpp
keeps them for presets (``{canonical key: text}``, ``"1"``/``"0"`` for
flags), so command line, environment and preset files merge the same way.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.llamacpp.flags import ARGS, TRUTHY, handling
from service.llamacpp.upstream_args import LlamaArg

_PREFIX = "llama:"
_GROUPS = (
    ("router", "llama-server: router", "The router itself: where models come from, how it listens, who may call it."),
    (
        "model",
        "llama-server: per-model defaults",
        "Passed to every model, as llama.cpp's router passes its own options to its children, over "
        "the presets' values. Options the inference worker cannot honour are accepted, warned about "
        "once and recorded in model_configured.ignored.",
    ),
    (
        "sampling",
        "llama-server: per-model defaults, sampling",
        "Accepted and recorded; send sampling values per request.",
    ),
    (
        "speculative",
        "llama-server: per-model defaults, speculative decoding",
        "The batch engine drafts, then verifies every slot's draft in one decode (docs/llama-cpp-compat.md).",
    ),
)


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """``--ctx_size`` -> ``--ctx-size``, as llama.cpp reads long options."""
    out = []
    for token in argv:
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            token = name.replace("_", "-") + eq + value
        out.append(token)
    return out


def _group_of(arg: LlamaArg) -> str:
    scope = handling(arg).scope
    if scope in ("router", "source"):
        return "router"
    if arg.sampling:
        return "sampling"
    if arg.speculative or arg.key.startswith("spec-") or arg.key.endswith("-draft"):
        return "speculative"
    return "model"


def _help(arg: LlamaArg) -> str:
    decided = handling(arg)
    verdict = decided.note if decided.honoured else f"ignored: {decided.note}"
    if decided.refused:  # the help is llama.cpp's refusal itself
        verdict = "refused: llama-server refuses it at start, and so does modelrouter"
    env = f" [env {arg.env}]" if arg.env else ""
    return f"{arg.help} ({verdict}){env}".replace("%", "%%")


def _metavar(arg: LlamaArg) -> str:
    # argparse's usage formatter chokes on brackets and spaces in metavars.
    hint = re.sub(r"[\[\]{}<>]", "", arg.value_hint).replace(" ", "_") or "VALUE"
    return hint if len(hint) <= 24 else "VALUE"


def _register(group: Any, arg: LlamaArg) -> None:
    dest = _PREFIX + arg.key
    help_text = _help(arg)
    if arg.key == "usage":
        group.add_argument(*arg.names, action="help", help="show this help and exit")
    elif arg.key == "api-key":
        group.add_argument(
            *arg.names, dest=dest, action="append", metavar="KEY", default=argparse.SUPPRESS, help=help_text
        )
    elif arg.kind in ("flag", "bool"):
        group.add_argument(
            *arg.names, dest=dest, action="store_const", const="1", default=argparse.SUPPRESS, help=help_text
        )
        if arg.negations:
            group.add_argument(
                *arg.negations,
                dest=dest,
                action="store_const",
                const="0",
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )
    elif arg.kind == "pair":
        group.add_argument(
            *arg.names, dest=dest, nargs=2, metavar=("A", "B"), default=argparse.SUPPRESS, help=help_text
        )
    else:
        kind = _directory if arg.key == "slot-save-path" else _int if arg.kind == "int" else str
        group.add_argument(
            *arg.names, dest=dest, type=kind, metavar=_metavar(arg), default=argparse.SUPPRESS, help=help_text
        )


def _int(text: str) -> str:
    int(text)  # a usage error here, as llama-server's stoi fails at start-up
    return text


def _directory(text: str) -> str:
    """``--slot-save-path``: a usage error unless a directory, as llama-server's start-up check
    (``common/arg.cpp``); else every save would fail later, one request at a time."""
    if not os.path.isdir(text):
        msg = f"not a directory: {text}"
        raise argparse.ArgumentTypeError(msg)
    return text


def add_llama_arguments(parser: argparse.ArgumentParser) -> None:
    """Register every llama-server option on ``parser`` (built with ``add_help=False``,
    since llama.cpp owns ``-h``), in the router / per-model / sampling / speculative groups."""
    groups = {key: parser.add_argument_group(title, text) for key, title, text in _GROUPS}
    for arg in ARGS:
        if not arg.preset_only:
            _register(groups[_group_of(arg)], arg)


def given_options(namespace: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """``(options, api keys)`` from a parsed command line: llama options actually
    given, by canonical key, and every ``--api-key`` (comma-separated ones split)."""
    options: dict[str, str] = {}
    keys: list[str] = []
    for dest, value in vars(namespace).items():
        if not dest.startswith(_PREFIX):
            continue
        key = dest[len(_PREFIX) :]
        if key == "api-key":
            keys += [k.strip() for item in value for k in item.split(",") if k.strip()]
        else:
            options[key] = " ".join(value) if isinstance(value, list) else str(value)
    return options, keys


def env_options(environ: Mapping[str, str], args: Iterable[LlamaArg] = ARGS) -> dict[str, str]:
    """llama options set through their environment variables, as llama-server reads them:
    ``LLAMA_ARG_NO_X`` turns a boolean off; a flag's variable counts when truthy."""
    options: dict[str, str] = {}
    for arg in args:
        if not arg.env or arg.preset_only:
            continue
        negated = arg.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1)
        if arg.negations and arg.env.startswith("LLAMA_ARG_") and negated in environ:
            options[arg.key] = "0"
        elif arg.env in environ:
            value = environ[arg.env]
            if arg.kind == "flag" and value.strip().lower() not in TRUTHY:
                continue  # llama.cpp runs a flag's handler only for a truthy value
            options[arg.key] = value
    return options
