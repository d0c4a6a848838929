"""llama-server's native ``POST /completion`` (its non-OpenAI completion) on the batch engine.

The request becomes an OpenAI completion request (``n_predict`` is ``max_tokens``, ``n_probs`` is
``logprobs``); the OpenAI completion objects the front shapes become llama-server's answer (``content``,
``tokens``, ``stop``, ``tokens_predicted``, ``timings``...), or its stream of partials (``data:`` lines
without ``[DONE]``), as ``tools/server/server-task.cpp`` writes them. ``response_fields`` keeps only the
paths asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NotRequired, TypedDict

from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject, is_token
from workers.inference.http._record import RequestRecord, TextCompletion, Timings, TokenProbs, shown_probs


def native_completion_body(body: JsonObject) -> JsonObject:
    """llama-server's ``/completion`` request as an OpenAI completion request:
    ``n_predict`` (default -1: until the context is full) is ``max_tokens``, ``n_probs`` is ``logprobs``."""
    out = dict(body)
    n_probs = out.pop("n_probs", None)
    if n_probs is not None:
        if not is_token(n_probs) or n_probs < 0:
            raise ApiError(400, "'n_probs' must be an integer >= 0")
        if n_probs > 0:  # each token's completion_probabilities: its own and the n_probs likeliest
            out["logprobs"] = n_probs
    n_predict = out.pop("n_predict", None)
    if "max_tokens" not in out:
        if n_predict is not None and (not is_token(n_predict) or n_predict < -1):
            raise ApiError(400, "'n_predict' must be an integer >= -1")
        out["max_tokens"] = 0 if n_predict is None or n_predict < 0 else n_predict
    return out


class NativeCompletion(TypedDict):
    """llama-server's ``/completion`` response (``completion_probabilities`` first, when asked for)."""

    completion_probabilities: NotRequired[list[TokenProbs] | list[JsonObject]]
    index: int
    content: str
    tokens: list[int]
    id_slot: int
    stop: bool
    model: NotRequired[str]
    tokens_predicted: int
    tokens_evaluated: int
    generation_settings: NotRequired[JsonObject]
    prompt: NotRequired[str]
    has_new_line: NotRequired[bool]
    truncated: NotRequired[bool]
    stop_type: NotRequired[str]
    stopping_word: NotRequired[str]
    tokens_cached: NotRequired[int]
    timings: NotRequired[Timings]
    prompt_progress: NotRequired[dict[str, float]]


def response_fields(body: JsonObject) -> list[str]:
    """``/completion``'s ``response_fields``: the paths its final answer keeps (none: all of it). As
    llama-server's ``json_value``, a value that is not a list of strings counts as none."""
    fields = body.get("response_fields")
    return fields if isinstance(fields, list) and all(isinstance(f, str) for f in fields) else []


def pick_fields(fields: list[str], answer: Mapping[str, Any]) -> JsonObject:
    """llama-server's ``json_get_nested_values``: each path (``a/b`` reads ``answer["a"]["b"]``) whose
    value exists, under the path itself (``generation_settings/n_predict`` moves to the root)."""
    out: JsonObject = {}
    for path in fields:
        value: Any = answer
        for key in path.split("/"):
            if not isinstance(value, Mapping) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


def native_whole(
    result: TextCompletion, req: RequestRecord, fields: list[str] | None = None
) -> NativeCompletion | JsonObject:
    """An OpenAI completion object → llama-server's ``/completion`` response (only ``fields`` if any).

    ``req`` is the request's record (kept by the front): ``params``, ``prompt``, ``n_prompt``,
    and once finished ``timings`` and the engine's ``final`` info (``id_slot``, ``tokens_cached``, ``stopping_word``).
    """
    choice = result["choices"][0]
    whole = _native_whole(choice["text"], choice["finish_reason"], result["model"], req, stream=False)
    return pick_fields(fields, whole) if fields else whole


def _native_whole(text: str, reason: str | None, model: str, req: RequestRecord, *, stream: bool) -> NativeCompletion:
    final = req.get("final")
    word = final["stopping_word"] if final else ""
    out: NativeCompletion = {
        "index": 0,
        "content": text,
        "tokens": list(final["tokens"]) if final and req.get("return_tokens") and not stream else [],
        "id_slot": final["id_slot"] if final else -1,
        "stop": True,
        "model": model,
        "tokens_predicted": int(req.get("timings", {}).get("predicted_n", 0)),
        "tokens_evaluated": int(req.get("n_prompt", 0)),
        "generation_settings": req.get("params", {}),
        "prompt": req.get("prompt", ""),
        "has_new_line": "\n" in text,
        "truncated": bool(final["truncated"]) if final else False,
        "stop_type": "word" if word else ("limit" if reason == "length" else "eos"),
        "stopping_word": word,
        "tokens_cached": final["tokens_cached"] if final else 0,
        "timings": req.get("timings", {}),
    }
    probs = req.get("probs")
    if probs and not stream:
        return {"completion_probabilities": shown_probs(probs, req), **out}
    return out


def native_chunks(
    chunks: Iterator[TextCompletion], req: RequestRecord, fields: list[str] | None = None
) -> Iterator[NativeCompletion | JsonObject]:
    """OpenAI completion chunks → llama-server's ``/completion`` stream: partial objects
    with ``stop: false``, then the whole response (empty ``content``, ``stop: true``; only ``fields`` if any)."""
    seen = sent = 0
    for chunk in chunks:
        choice = chunk["choices"][0]
        if choice["finish_reason"] is None:
            ids = req.get("tokens") or []  # every token sampled so far, its end token aside
            part: NativeCompletion = {
                "index": 0,
                "content": choice["text"],
                "tokens": ids[sent:],
                "stop": False,
                "id_slot": -1,
                "tokens_predicted": len(ids),  # llama-server's n_decoded
                "tokens_evaluated": int(req.get("n_prompt", 0)),
            }
            sent = len(ids)
            probs = req.get("probs") or []
            if len(probs) > seen:  # the tokens of this chunk
                part["completion_probabilities"], seen = shown_probs(probs[seen:], req), len(probs)
            if "timings" in chunk:  # timings_per_token
                part["timings"] = chunk["timings"]
            if "prompt_progress" in chunk:  # return_progress
                part["prompt_progress"] = chunk["prompt_progress"]
            yield part
            continue
        final = req.get("final")
        held = final["tokens"][sent:] if final else []
        if held:  # a stop string's tokens, an end-of-generation token: no text, but llama-server sends their ids
            yield {
                "index": 0,
                "content": "",
                "tokens": held,
                "stop": False,
                "id_slot": -1,
                "tokens_predicted": len(final["tokens"]) if final else 0,
                "tokens_evaluated": int(req.get("n_prompt", 0)),
            }
        whole = _native_whole("", choice["finish_reason"], chunk["model"], req, stream=True)
        yield pick_fields(fields, whole) if fields else whole
