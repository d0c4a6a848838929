"""llama-server's sampling options -> the model's server-side request defaults, pure.

``llama-server --temp 0.2 --top-k 20 -n 256`` makes those the defaults of every
request that does not set them (``params_from_json_cmpl`` starts from
``params_base``). The router turns each option into the request field it
defaults (``--temp`` -> ``temperature``, ``--mirostat-ent`` -> ``mirostat_tau``)
and passes them to the model's worker as one JSON object
(``--sampling-defaults``), which merges them under every completion, chat,
Anthropic and Responses request (``workers/inference/http/dialects/_server_defaults.py``)
and reports them in ``GET /props``' ``default_generation_settings``.
File options (``--grammar-file``, ``--json-schema-file``) are read by the worker
at start, as llama-server reads them at start: a missing file fails the load.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

Convert = Callable[[str, str], Any]


def _float(key: str, value: str) -> float:
    try:
        return float(value.strip())
    except ValueError:
        raise ValueError(f"{key} = {value!r}: expected a number") from None


def _int(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"{key} = {value!r}: expected an integer") from None


_BIAS = re.compile(r"^\s*(\d+)\s*([+-]\s*[0-9.eE+-]+|[+-]?inf)\s*$")


def _logit_bias(key: str, value: str) -> list[list[float]]:
    """``-l 15043+1`` / ``-l 15043-inf``: llama.cpp's ``TOKEN_ID(+/-)BIAS`` (comma-separated here)."""
    pairs = []
    for item in value.split(","):
        m = _BIAS.match(item)
        if m is None:
            raise ValueError(f"{key} = {value!r}: expected TOKEN_ID(+/-)BIAS, e.g. 15043+1")
        pairs.append([int(m.group(1)), float(m.group(2).replace(" ", ""))])
    return pairs


def _json_schema(key: str, value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise ValueError(f"{key} = {value!r}: expected a JSON schema") from None


def _temperature(key: str, value: str) -> float:
    return max(_float(key, value), 0.0)  # llama.cpp: std::max(temp, 0.0f), a negative one is greedy


def _dry_base(key: str, value: str) -> float | None:
    base = _float(key, value)
    return base if base >= 1.0 else None  # llama.cpp keeps its default below 1


def _breakers(_key: str, value: str) -> list[str]:
    # llama.cpp: "none" clears the list; escapes (\n, \t, ...) are processed
    if value.strip() == "none":
        return []
    return [value.encode("utf-8").decode("unicode_escape")]


def _on(_key: str, value: str) -> bool:
    return value.strip().lower() not in ("off", "disabled", "false", "0")


# option key -> (request field, converter)
FIELDS: Mapping[str, tuple[str, Convert]] = {
    "temperature": ("temperature", _temperature),
    "top-k": ("top_k", _int),
    "top-p": ("top_p", _float),
    "min-p": ("min_p", _float),
    "typical-p": ("typical_p", _float),
    "top-n-sigma": ("top_n_sigma", _float),
    "xtc-probability": ("xtc_probability", _float),
    "xtc-threshold": ("xtc_threshold", _float),
    "repeat-last-n": ("repeat_last_n", _int),
    "repeat-penalty": ("repeat_penalty", _float),
    "presence-penalty": ("presence_penalty", _float),
    "frequency-penalty": ("frequency_penalty", _float),
    "dry-multiplier": ("dry_multiplier", _float),
    "dry-base": ("dry_base", _dry_base),
    "dry-allowed-length": ("dry_allowed_length", _int),
    "dry-penalty-last-n": ("dry_penalty_last_n", _int),
    "dry-sequence-breaker": ("dry_sequence_breakers", _breakers),
    "adaptive-target": ("adaptive_target", _float),
    "adaptive-decay": ("adaptive_decay", _float),
    "dynatemp-range": ("dynatemp_range", _float),
    "dynatemp-exp": ("dynatemp_exponent", _float),
    "mirostat": ("mirostat", _int),
    "mirostat-lr": ("mirostat_eta", _float),
    "mirostat-ent": ("mirostat_tau", _float),
    "samplers": ("samplers", lambda _k, v: [s for s in v.split(";") if s.strip()]),
    "sampling-seq": ("samplers", lambda _k, v: v.strip()),  # letters: the worker reads both forms
    "ignore-eos": ("ignore_eos", _on),
    "logit-bias": ("logit_bias", _logit_bias),
    "grammar": ("grammar", lambda _k, v: v),
    "grammar-file": ("grammar_file", lambda _k, v: v.strip()),
    "json-schema": ("json_schema", _json_schema),
    "json-schema-file": ("json_schema_file", lambda _k, v: v.strip()),
    "n-predict": ("n_predict", _int),
    "keep": ("n_keep", _int),
    "cache-reuse": ("n_cache_reuse", _int),
    "cache-prompt": ("cache_prompt", _on),
}


def field_of(key: str) -> str | None:
    """The request field an option defaults, or None if it is not one of these."""
    entry = FIELDS.get(key)
    return entry[0] if entry else None


def convert(key: str, value: str) -> dict[str, Any]:
    """``{field: value}`` for one option, ``{}`` for a value llama.cpp ignores (``--dry-base``
    below 1); ``ValueError`` names the option on a bad value."""
    name, conv = FIELDS[key]
    converted = conv(key, value)
    return {} if converted is None else {name: converted}
