"""llama-server's sampling options as every request's defaults (``--sampling-defaults``).

llama-server starts each request's parameters from its command line
(``--temp``, ``--top-k``, ``-n``, ``--grammar-file``...) and lets the request
override any of them. The service sends them as one JSON object of request
fields (``service/llamacpp/sampling_defaults.py``); :func:`load` reads the
file options once at start, :func:`with_defaults` merges them under a body
before it is validated, so a default is checked as strictly as a request's
own value and a request's value always wins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from workers.inference.engine import sampler_order
from workers.inference.http._json import Json, JsonObject, is_number

# every way a request can say how many tokens to generate
_LENGTH_FIELDS = ("max_tokens", "max_completion_tokens", "n_predict", "max_output_tokens")


def load(text: str | None) -> JsonObject:
    """The defaults object, its ``grammar_file`` and ``json_schema_file`` read (``OSError`` or
    ``ValueError`` naming the file: the worker fails to load, as llama-server fails to start)."""
    if not text:
        return {}
    defaults = dict(json.loads(text))
    path = defaults.pop("grammar_file", None)
    if path:
        defaults["grammar"] = Path(path).read_text()
    path = defaults.pop("json_schema_file", None)
    if path:
        try:
            defaults["json_schema"] = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"--json-schema-file {path}: not JSON ({exc})") from None
    return defaults


def with_defaults(body: JsonObject, defaults: Mapping[str, Json], route: str) -> JsonObject:
    """``body`` with each default the request does not set; ``n_predict`` becomes the route's own
    length field (``n_predict`` on ``/completion``, ``max_output_tokens`` on ``/responses``,
    ``max_tokens`` elsewhere) when the request names no length."""
    if not defaults:
        return body
    out = dict(body)
    for key, value in defaults.items():
        if key == "n_predict":
            continue
        if key == "mirostat" and out.get("mirostat_mode") is not None:
            continue
        if key == "grammar" and out.get("json_schema") is not None:  # one constraint per request
            continue
        if key == "json_schema" and out.get("grammar") is not None:
            continue
        if out.get(key) is None:
            out[key] = value
    n_predict = defaults.get("n_predict")
    if n_predict is not None and not any(out.get(k) is not None for k in _LENGTH_FIELDS):
        if route in ("/completion", "/infill"):
            out["n_predict"] = n_predict
        elif (
            is_number(n_predict) and n_predict >= 0 and route != "/messages"
        ):  # Anthropic's max_tokens is the client's to give
            out["max_output_tokens" if route == "/responses" else "max_tokens"] = n_predict
    return out


def shown(defaults: Mapping[str, Json], seed: int | None = None) -> JsonObject:
    """The defaults as ``/props``' ``default_generation_settings.params`` names them, with the
    worker's ``--seed`` (llama.cpp keeps it as a uint32: ``--seed -1`` shows as 4294967295)."""
    out = {k: v for k, v in defaults.items() if k not in ("json_schema", "logit_bias")}
    if seed is not None:
        out["seed"] = seed & 0xFFFFFFFF
    order = sampler_order(out.get("samplers"))  # --sampler-seq letters, --samplers aliases (top-k, temp)
    if order is not None:  # shown by their names, as llama-server does
        out["samplers"] = list(order)
    return out
