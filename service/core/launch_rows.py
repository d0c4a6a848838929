"""The rows of the inference launch's option table: what one option is, and llama.cpp's enums.

:class:`~service.core.launch.InferenceLaunch` declares each of its fields with :func:`option`;
this module holds the row's shape and the named values llama.cpp numbers (``ggml_type``...).

Pure module: stdlib only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

T = TypeVar("T")

Goes = Literal["model", "context", "sampler", "server"]
"""Where a value goes in the worker: ``llama_model_params``, ``llama_context_params`` (and the
batch engine's context), every request's sampler defaults, or the worker's HTTP server."""
Kind = Literal["value", "json", "list", "switch", "unswitch", "both"]
"""``value``: ``--flag VALUE``; ``json``: ``--flag TEXT``, a JSON object as a parameter and its text on
the command line; ``list``: a repeatable ``--flag VALUE``; ``switch``: ``--flag`` sets True;
``unswitch``: ``--no-flag`` sets False (the flag is on by default); ``both``: ``--flag`` and
``--no-flag`` (on by default)."""

ABSENT = object()
"""A row's ``absent`` when the worker's default stands for a missing parameter."""


@dataclass(frozen=True, slots=True)
class Option:
    """One row of the table: an :class:`InferenceLaunch` field's flags, names and destination."""

    flags: tuple[str, ...]
    """The worker's spellings; :meth:`InferenceLaunch.to_argv` writes the first."""
    goes: Goes
    kind: Kind = "value"
    parse: Callable[[str], object] = str
    """A flag's text to the value (``int``, ``float``, a normaliser); raises ``ValueError``."""
    key: str | None = None
    """llama-server's option (its preset key, ``ctx-size``); None: modelrouter's own."""
    env: str | None = None
    """llama-server's environment variable (``LLAMA_ARG_CTX_SIZE``), if it has one."""
    choices: Mapping[str, int] | None = None
    """Allowed values, with llama.cpp's enum number for each (``ggml_type``, ``llama_rope_scaling_type``...)."""
    llama: str | None = None
    """The ``llama_model_params``/``llama_context_params`` field it sets when given (``rope_freq_base``)."""
    absent: object = ABSENT
    """The value when a model's parameters leave it out, if that is not the worker's default
    (``endpoint_metrics``: off in llama-server, on for a worker started by hand)."""
    help: str = ""


def option(
    default: T,
    flags: str,
    goes: Goes,
    key: str | None = None,
    env: str | None = None,
    *,
    kind: Kind | None = None,
    parse: Callable[[str], object] = str,
    choices: Mapping[str, int] | None = None,
    llama: str | None = None,
    absent: object = ABSENT,
    help: str = "",
) -> T:
    """A field of :class:`InferenceLaunch`: its default (the worker's) and its row of the table.
    ``flags``: the worker's spellings, space-separated; ``kind`` by default from the default's type
    (False: ``switch``, True: ``both``, or ``unswitch`` when the flag is ``--no-...``; a tuple: ``list``)."""
    spellings = tuple(flags.split())
    row = Option(spellings, goes, kind or _kind(default, spellings), parse, key, env, choices, llama, absent, help)
    return dataclasses.field(default=default, metadata={"option": row})


def _kind(default: object, flags: tuple[str, ...]) -> Kind:
    if isinstance(default, bool):
        return ("unswitch" if flags[0].startswith("--no-") else "both") if default else "switch"
    return "list" if isinstance(default, tuple) else "value"


def _on_off_auto(value: str, flag: str) -> str:
    """llama.cpp's ``[on|off|auto]`` value: its truthy and falsey words, ``auto`` or ``-1``."""
    word = value.strip().lower()
    if word in ("on", "enabled", "true", "1"):
        return "on"
    if word in ("off", "disabled", "false", "0"):
        return "off"
    if word in ("auto", "-1"):
        return "auto"
    msg = f"unknown value for {flag}: '{value}'"
    raise ValueError(msg)


def flash_attn(value: str) -> str:
    """llama-server's ``-fa`` value: on, off or auto."""
    return _on_off_auto(value, "--flash-attn")


def reasoning_mode(value: str) -> str:
    """llama-server's ``--reasoning`` value: on, off or auto."""
    return _on_off_auto(value, "--reasoning")


CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6, "q5_1": 7}
"""``ggml_type`` values by ``--cache-type-k/-v`` name: llama-server's ``kv_cache_types``."""
POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
"""``llama_pooling_type`` values by ``--pooling`` name (-1: the model's own)."""
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
"""``llama_flash_attn_type`` values by ``--flash-attn`` value."""
ROPE_SCALING = {"none": 0, "linear": 1, "yarn": 2}
"""``llama_rope_scaling_type`` values by ``--rope-scaling`` name."""
LOAD_MODES = {"auto": -1, "none": 0, "mmap": 1, "mlock": 2, "mmap+mlock": 3, "dio": 4}
"""``llama_load_mode`` values by ``--load-mode`` name."""
LAZY_MODES = {"off": 0, "auto": 1, "on": 2}
"""``llama_lazy_mode`` values by ``--lazy-mode`` name."""
REASONING_FORMATS = {"none": 0, "auto": 1, "deepseek": 2, "deepseek-legacy": 3}
"""llama-server's ``--reasoning-format`` names (the worker parses the reasoning itself)."""
