"""llama-server's ``POST /infill``: fill-in-the-middle with the model's FIM tokens.

The prompt is ``format_prompt_infill``'s (``server-common.cpp``): the repository
context (``input_extra`` chunks, each after ``FIM_SEP`` and its file name when the
vocabulary has one), then ``[BOS] FIM_PRE prefix prompt FIM_SUF suffix FIM_MID``
(``--spm-infill``: suffix before prefix), the prefix cut to its last ``3/4`` of
``n_batch`` tokens and the suffix to what is left of the last quarter. The answer
is the native ``/completion`` one: the request runs as that, with these tokens.
"""

from __future__ import annotations

from typing import Any

from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject
from workers.inference.http.dialects._embeddings import tokenize_mixed


def _text(front: Any, text: str) -> list[int]:
    return list(front.llm.tokenize_whole(text.encode("utf-8"), add_special=False, parse_special=False))


def _checked(body: JsonObject) -> list[JsonObject]:
    if "prompt" in body and not isinstance(body["prompt"], str):
        raise ApiError(400, '"prompt" must be a string')
    for key in ("input_prefix", "input_suffix"):
        if key not in body:
            raise ApiError(400, f'"{key}" is required')
    extra = body.get("input_extra", [])
    if not isinstance(extra, list):
        raise ApiError(400, '"input_extra" must be an array of {"filename": string, "text": string}')
    for chunk in extra:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise ApiError(400, 'extra_context chunk must contain a "text" field with a string value')
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise ApiError(400, """extra_context chunk's "filename" field must be a string""")
    return extra


def _extra_tokens(front: Any, extra: list[JsonObject]) -> list[int]:
    llm, lc = front.llm, front.llm.lc
    rep, sep = int(lc.llama_vocab_fim_rep(llm.vocab)), int(lc.llama_vocab_fim_sep(llm.vocab))
    out: list[int] = []
    if rep >= 0:
        out += [rep, *_text(front, "myproject\n")]
    for chunk in extra:
        if sep >= 0:
            out += [sep, *_text(front, str(chunk.get("filename", "tmp")) + "\n")]  # a string (checked)
        else:
            out += _text(front, "\n\n--- snippet ---\n\n")
        out += _text(front, str(chunk["text"]))  # a string (checked)
    if sep >= 0:
        out += [sep, *_text(front, "filename\n")]
    return out


def infill_tokens(front: Any, body: JsonObject, *, spm: bool) -> list[int]:
    """The FIM prompt of an ``/infill`` request (module docstring); 501 without FIM tokens."""
    llm, lc = front.llm, front.llm.lc
    pre, suf, mid = (
        int(f(llm.vocab)) for f in (lc.llama_vocab_fim_pre, lc.llama_vocab_fim_suf, lc.llama_vocab_fim_mid)
    )
    missing = [name for name, tok in (("prefix", pre), ("suffix", suf), ("middle", mid)) if tok < 0]
    if missing:
        detail = "".join(f"{name} token is missing. " for name in missing)
        raise ApiError(501, f"Infill is not supported by this model: {detail}", "not_supported_error")
    extra = _extra_tokens(front, _checked(body))
    prompt = tokenize_mixed(front, body.get("prompt", ""), add_special=False, parse_special=True)
    prefix = tokenize_mixed(front, body["input_prefix"], add_special=False, parse_special=False)
    suffix = tokenize_mixed(front, body["input_suffix"], add_special=False, parse_special=False)
    n_batch, n_ctx = llm.n_batch, llm.n_ctx
    asked = body.get("n_predict", -1)
    n_predict = asked if isinstance(asked, int) else -1
    take_prefix = min(len(prefix), 3 * (n_batch // 4))
    take_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    take_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra))
    head = [pre, *prefix[len(prefix) - take_prefix :], *prompt]
    tail = [suf, *suffix[:take_suffix]]
    first, second = (tail, head) if spm else (head, tail)
    if llm.add_bos:
        first = [llm.bos, *first]
    return [*extra[len(extra) - take_extra :], *first, *second, mid]
