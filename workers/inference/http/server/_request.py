"""One engine request seen from its HTTP thread: the extras it carries and the queue it is read from.

:class:`RequestContext` travels thread-locally beside ``Llama``'s call signature (the front's
``create_completion``); :func:`request_events` reads the request's queue until its end.
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
    Watched,
    strict_json_strings,
)
from workers.inference.http._errors import ApiError
from workers.inference.http._record import RequestRecord
from workers.inference.llama import LoraKey

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
