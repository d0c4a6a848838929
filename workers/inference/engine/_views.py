"""The engine's answers as its HTTP layer serves them, one TypedDict each: llama-server's shapes where
it has them (``/slots``, the slot actions), the worker's own for the step log, the heartbeat and
``instance_stats``. Plain dicts at run time, so they are written out as they always were."""

from __future__ import annotations

from typing import TypedDict


class Heartbeat(TypedDict):
    """``GET /engine/heartbeat`` (:class:`~workers.inference.engine._step_clock.StepClock`)."""

    steps: int
    step_s: float | None  # how long the step in progress has run; None when idle
    slowest_s: float
    waiting: int  # requests queued or running


class EngineStats(TypedDict):
    """The load summary ``instance_stats`` records."""

    slots_total: int
    slots_busy: int
    queue_depth: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    requests_finished: int


class Step(TypedDict):
    """One step of ``GET /engine/steps``."""

    step: int
    decoded: list[int]  # request ids
    prefilled: list[list[int]]  # [id, prompt length, tokens evaluated]
    ended: list[int]  # requests released in or before the step
    rows: int  # the llama_decode's rows: tokens, drafted tokens, pad rows (speculative._step_cost.tile_pad)


class NextToken(TypedDict):
    has_next_token: bool
    has_new_line: bool
    n_remain: int
    n_decoded: int


class SlotView(TypedDict, total=False):
    """llama-server's ``/slots`` entry (without the prompt and generated text); the request's
    members only while the slot has (or had) one."""

    id: int
    n_ctx: int
    speculative: bool
    is_processing: bool
    n_cached: int  # modelrouter's: tokens whose KV cells the slot holds
    id_task: int
    n_prompt_tokens: int
    n_prompt_tokens_processed: int
    n_prompt_tokens_cache: int
    params: dict[str, object]  # the request's sampling, by llama-server's names
    next_token: list[NextToken]


class SaveTimings(TypedDict):
    save_ms: float


class RestoreTimings(TypedDict):
    restore_ms: float


class SlotSaved(TypedDict):
    id_slot: int
    filename: str
    n_saved: int
    n_written: int
    timings: SaveTimings


class SlotRestored(TypedDict):
    id_slot: int
    filename: str
    n_restored: int
    n_read: int
    timings: RestoreTimings


class SlotErased(TypedDict):
    id_slot: int
    n_erased: int


class Done(TypedDict):
    success: bool


SlotAnswer = SlotSaved | SlotRestored | SlotErased | Done
"""llama-server's answer to a slot action (``POST /slots/{id}?action=``) or ``POST /lora-adapters``."""
