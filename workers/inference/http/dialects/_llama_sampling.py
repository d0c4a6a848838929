"""llama-server's request fields that llama-cpp-python's keywords lack: its extra samplers, and a
chat's own ``grammar``/``json_schema`` (pure validation, as :mod:`._requests`)."""

from __future__ import annotations

from typing import Literal, TypedDict

from workers.inference.engine import sampler_order
from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject, is_number

FloatField = Literal[
    "dry_multiplier",
    "dry_base",
    "xtc_probability",
    "xtc_threshold",
    "top_n_sigma",
    "dynatemp_range",
    "dynatemp_exponent",
    "adaptive_target",
    "adaptive_decay",
]
IntField = Literal["dry_allowed_length", "dry_penalty_last_n", "penalty_last_n"]


class LlamaSampling(TypedDict, total=False):
    """SamplingParams' own fields that a request set (``SamplingParams(**these)``)."""

    dry_multiplier: float
    dry_base: float
    xtc_probability: float
    xtc_threshold: float
    top_n_sigma: float
    dynatemp_range: float
    dynatemp_exponent: float
    adaptive_target: float
    adaptive_decay: float
    dry_allowed_length: int
    dry_penalty_last_n: int
    penalty_last_n: int
    dry_sequence_breakers: tuple[str, ...]
    samplers: tuple[str, ...]
    post_sampling_probs: bool  # /completion's only (set by the route, not read here)


# llama-server's sampling fields beyond llama-cpp-python's keywords -> SamplingParams fields
_LLAMA_FLOATS: dict[str, FloatField] = {
    "dry_multiplier": "dry_multiplier",
    "dry_base": "dry_base",
    "xtc_probability": "xtc_probability",
    "xtc_threshold": "xtc_threshold",
    "top_n_sigma": "top_n_sigma",
    "dynatemp_range": "dynatemp_range",
    "dynatemp_exponent": "dynatemp_exponent",
    "adaptive_target": "adaptive_target",
    "adaptive_decay": "adaptive_decay",
}
_LLAMA_INTS: dict[str, IntField] = {
    "dry_allowed_length": "dry_allowed_length",
    "dry_penalty_last_n": "dry_penalty_last_n",
    "repeat_last_n": "penalty_last_n",
}


def llama_sampling(body: JsonObject) -> LlamaSampling:
    """llama.cpp's samplers that llama-cpp-python's keywords lack (DRY, XTC, top-n-sigma, dynamic
    temperature, adaptive-p, ``repeat_last_n``, the ``samplers`` order), as SamplingParams fields."""
    out: LlamaSampling = {}
    for key, field in _LLAMA_FLOATS.items():
        value = body.get(key)
        if value is not None:
            if not is_number(value):
                raise ApiError(400, f"'{key}' must be a number")
            out[field] = float(value)
    for key, int_field in _LLAMA_INTS.items():
        value = body.get(key)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < -1:
                raise ApiError(400, f"'{key}' must be an integer >= -1")
            out[int_field] = value
    breakers = body.get("dry_sequence_breakers")
    if breakers is not None:
        if not isinstance(breakers, list) or not breakers or not all(isinstance(b, str) for b in breakers):
            raise ApiError(400, "Error: dry_sequence_breakers must be a non-empty array of strings")
        out["dry_sequence_breakers"] = tuple(str(b) for b in breakers)  # all strings (checked above)
    if body.get("samplers") is not None:
        order = sampler_order(body["samplers"])
        if order is None:
            raise ApiError(400, "'samplers' must be a list of sampler names or a string of sampler letters")
        out["samplers"] = order
    return out


def llama_constraint(body: JsonObject) -> JsonObject:
    """llama-server's ``grammar`` (GBNF) or ``json_schema`` on a chat, as a response format."""
    if body.get("grammar") is not None:
        if not isinstance(body["grammar"], str):
            raise ApiError(400, "'grammar' must be a GBNF string")
        return {"type": "gbnf", "grammar": body["grammar"]}
    if not isinstance(body["json_schema"], dict):
        raise ApiError(400, "'json_schema' must be an object")
    return {"type": "json_object", "schema": body["json_schema"]}
