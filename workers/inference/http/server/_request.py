"""One engine request seen from its HTTP thread: the extras it carries, its record and the queue it is
read from.

:class:`RequestContext` travels thread-locally beside ``Llama``'s call signature (the front's
``create_completion``); :func:`record_settings` writes what ``/completion`` answers with into its
record; :func:`request_events` reads the request's queue until its end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from workers.inference.engine import (
    IDLE,
    ReasoningControl,
    Request,
    RequesterLeft,
    RequestQueue,
    SamplingParams,
    Watched,
    strict_json_strings,
)
from workers.inference.http._errors import ApiError
from workers.inference.http._json import json_object
from workers.inference.http._record import RequestRecord
from workers.inference.http.dialects import detokenized, generation_settings
from workers.inference.llama import LlamaModel, LoraKey

POLL_S = 0.05  # how often a waiting handler checks whether its client hung up


@dataclass
class RequestContext:
    """A request's extras that ``Llama``'s signature has no room for, and its record (``result``)."""

    client_gone: Callable[[], bool] | None = None
    cache_prompt: bool = True
    ignore_eos: bool = False
    n_keep: int = 0
    lora: LoraKey | None = None  # the request's own adapter set; None: the worker's
    id_slot: int = -1  # llama-server's id_slot: the slot the request must run in, -1: any
    n_cache_reuse: int = 0  # llama-server's: min run of cached tokens shifted into place (--cache-reuse)
    cmpl_id: str = ""  # a chat's id (``chatcmpl-…``), set before its completion runs: a control names it
    reasoning: ReasoningControl | None = None  # a chat's reasoning_control
    verbose: bool = False  # llama-server's __verbose on an OpenAI chat or completion answer
    return_progress: bool = False  # llama-server's prompt_progress chunks (a stream's)
    timings_per_token: bool = False  # llama-server's timings on every chunk
    result: RequestRecord = field(default_factory=lambda: RequestRecord())  # timings and usage, once finished


@dataclass(frozen=True)
class SettingsShown:
    """The worker's settings a request's ``generation_settings`` shows (``--reasoning-format``, ``--spec-type``)."""

    reasoning_format: str
    spec_types: str


def record_settings(
    ctx: RequestContext,
    llm: LlamaModel,
    params: SamplingParams,
    stops: tuple[str, ...],
    tokens: list[int],
    shown: SettingsShown,
    *,
    max_tokens: int,
    stream: bool,
) -> None:
    """The request's ``generation_settings`` and prompt (what ``/completion`` answers with) into its
    record: llama-server's ``prompt`` is the tokens evaluated, detokenized with their special tokens."""
    ctx.result["prompt"], ctx.result["n_prompt"] = detokenized(llm, tokens), len(tokens)
    ctx.result["params"] = generation_settings(
        {**json_object(params.to_json()), "stop": list(stops)},
        n_predict=max_tokens,
        stream=stream,
        n_keep=ctx.n_keep,
        ignore_eos=ctx.ignore_eos,
        logit_bias=params.logit_bias,
        reasoning_format=shown.reasoning_format,
        lora=ctx.lora or (),
        post_sampling_probs=params.post_sampling_probs,
        spec_types=shown.spec_types,
    )


def request_events(engine: RequestQueue, req: Request, gone: Callable[[], bool] | None) -> Iterator[tuple[Any, ...]]:
    """The request's queue until its end; a hung-up client or an abandoned iterator cancels it.

    ``gone`` is passed in, not read from the request context: a generator's
    body first runs at the first ``next()``, after the front's ``run_job`` returned.
    """
    done = False
    try:
        watched = Watched(req.out, gone, POLL_S)
        while True:
            try:
                item = watched.get()
            except RequesterLeft:
                raise ApiError(499, "client disconnected", "cancelled") from None
            if item is IDLE:
                continue
            if item[0] == "e":
                done = True
                raise item[1]
            yield item
            if item[0] == "d":
                done = True
                return
    finally:
        if not done:
            engine.cancel(req)


def gbnf_text(grammar: Any) -> str | None:
    """The GBNF text of a ``LlamaGrammar`` (what the chat handlers pass), JSON strings made strict."""
    text = getattr(grammar, "_grammar", None)
    return strict_json_strings(text) if text else None
