"""What one request leaves on record while it runs, and the completion objects it is answered from.

On the floor of the HTTP package (beside ``_errors`` and ``_options``): the chat room's
:class:`~.chat._session.ChatRun`, the dialects' shapers and the server's request context all
share it, so it lives below them.
"""

from __future__ import annotations

import math
from typing import NotRequired, TypedDict

from workers.inference.http._json import JsonObject

Timings = dict[str, float]  # the engine's (``SlotTimings.to_json``): token counts and milliseconds


class FinalInfo(TypedDict):
    """The engine's last word on a request (``("d", reason, timings, info)``)."""

    tokens: list[int]  # the reply's tokens as sampled (llama-server's return_tokens)
    id_slot: int
    tokens_cached: int
    stopping_word: str
    truncated: bool


class TokenLogprob(TypedDict):
    """One token's probability as llama-server writes it (``completion_token_output::to_json``)."""

    id: int
    token: str
    bytes: list[int]
    logprob: float


class TokenProbs(TokenLogprob):
    """A sampled token's entry: its own probability and the likeliest others'."""

    top_logprobs: list[TokenLogprob]


class CachedTokens(TypedDict):
    cached_tokens: int


class CompletionUsage(TypedDict):
    """OpenAI's ``usage`` of a completion or a chat."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: CachedTokens


class RequestRecord(TypedDict, total=False):
    """The record: ``params`` (the request's generation settings), ``prompt`` and ``n_prompt`` once
    submitted; ``probs`` as tokens come (``/completion``'s ``n_probs``), ``tokens`` too (its streams);
    ``return_tokens`` as asked; ``timings``, ``usage`` and ``final`` once finished."""

    params: JsonObject  # llama-server's generation_settings, written as they are (never read back)
    prompt: str  # the prompt's tokens detokenized, special tokens and all (llama-server's)
    n_prompt: int
    probs: list[TokenProbs]
    tokens: list[int]  # a native stream's token ids so far (each chunk carries its own)
    return_tokens: bool  # llama-server's: the whole answer's ``tokens``
    timings: Timings
    usage: CompletionUsage
    final: FinalInfo


class CompletionLogprobs(TypedDict):
    """A completion chunk's ``logprobs``: OpenAI's legacy fields (what its clients parse) and
    llama-server's ``content`` entries (what a chat's ``logprobs.content`` is cut from)."""

    tokens: list[str]
    text_offset: list[int]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    content: list[TokenProbs]


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: CompletionLogprobs | None
    finish_reason: str | None


class Telemetry(TypedDict, total=False):
    """llama-server's telemetry on a stream's chunk: the timings so far (``timings_per_token``), or
    the prompt's progress (``return_progress``: ``total``, ``cache``, ``processed``, ``time_ms``)."""

    timings: Timings
    prompt_progress: dict[str, float]


class TextCompletion(TypedDict):
    """A ``text_completion`` object or chunk (the usage chunk lacks ``system_fingerprint``)."""

    id: str
    object: str
    created: int
    model: str
    system_fingerprint: NotRequired[str]
    choices: list[CompletionChoice]
    usage: NotRequired[CompletionUsage]
    timings: NotRequired[Timings]
    prompt_progress: NotRequired[dict[str, float]]  # llama-server's return_progress


def shown_probs(entries: list[TokenProbs], req: RequestRecord) -> list[TokenProbs] | list[JsonObject]:
    """``completion_probabilities`` entries as llama-server shows them: with the request's
    ``post_sampling_probs``, probabilities (``prob``, ``top_probs``) in place of log-probabilities."""
    if not req.get("params", {}).get("post_sampling_probs"):
        return entries
    shown: list[JsonObject] = [
        {
            "id": e["id"],
            "token": e["token"],
            "bytes": list(e["bytes"]),
            "prob": math.exp(e["logprob"]),
            "top_probs": [
                {"id": t["id"], "token": t["token"], "bytes": list(t["bytes"]), "prob": math.exp(t["logprob"])}
                for t in e["top_logprobs"]
            ],
        }
        for e in entries
    ]
    return shown
