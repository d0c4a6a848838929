"""The inference engines, behind one protocol; they know llama.cpp, not HTTP.

* ``_protocol``: :class:`Engine` (what the worker and its HTTP front use),
  :class:`EngineMonitor` (live state), and the batch engine's seam with its
  request front (:class:`JobRunner`, :class:`RequestQueue`, :data:`FrontFactory`).
* ``_batch``: :class:`BatchEngine`, ``n_parallel`` slots decoded together, one
  ``llama_decode`` per step (continuous batching, chunked prefill, prefix reuse).
* ``_embed``: :class:`EmbedRequest` and the lane that decodes embeddings and rerank scores.
* ``_legacy``: :class:`LegacyEngine`, ``llama_cpp.Llama`` one request at a time.
* ``_job``: :class:`Job`, one HTTP request as an engine receives it.
* ``_slots``: :class:`Request` and the slots that run requests; ``_sampling``:
  llama.cpp's sampler chain per request; ``_metrics``: llama-server's counters.
* ``_reasoning``: ``reasoning_control``, a running chat's reasoning ended from outside.
* ``_finished``: the worker log's line for each finished request (both engines write it).
* ``_tokens``: what becomes of a sampled token; ``_kept_logits``: the logits a
  slot keeps when a request ends, so an exact repeat of its prompt needs no decode.
* ``_step_clock``: the engine thread's progress (steps, the one in progress), which the service's
  liveness check reads (``GET /engine/heartbeat``).
* ``_errors``: what goes wrong in an engine (:class:`EngineError` and its kinds);
  the HTTP front turns each into an answer.
"""

from __future__ import annotations

from workers.inference.engine._batch import BatchEngine
from workers.inference.engine._disk_cache import SAVE_BOUND_S, PromptDisk
from workers.inference.engine._embed import EmbedRequest
from workers.inference.engine._embed import wait_all as wait_embeddings
from workers.inference.engine._errors import (
    EngineError,
    EngineFailed,
    EngineNotReady,
    EngineStopping,
    RequestCancelled,
    RequestRejected,
)
from workers.inference.engine._finished import FinishedLog
from workers.inference.engine._job import IDLE, Job, RequesterLeft, Watched
from workers.inference.engine._legacy import LegacyEngine
from workers.inference.engine._protocol import Engine, EngineMonitor, FrontFactory, JobRunner, RequestQueue
from workers.inference.engine._reasoning import ReasoningControl, ThinkTags
from workers.inference.engine._sampling import (
    SamplerError,
    SamplingParams,
    build_chain,
    chain_seed,
    greedy_pick,
    sampler_order,
    strict_json_strings,
)
from workers.inference.engine._slot_files import SlotAction
from workers.inference.engine._slots import Request
from workers.inference.engine._views import EngineStats, Heartbeat, SlotAnswer, SlotView, Step

__all__ = [
    "IDLE",
    "SAVE_BOUND_S",
    "BatchEngine",
    "EmbedRequest",
    "Engine",
    "EngineError",
    "EngineFailed",
    "EngineMonitor",
    "EngineNotReady",
    "EngineStats",
    "EngineStopping",
    "FinishedLog",
    "FrontFactory",
    "Heartbeat",
    "Job",
    "JobRunner",
    "LegacyEngine",
    "PromptDisk",
    "ReasoningControl",
    "Request",
    "RequestCancelled",
    "RequestQueue",
    "RequestRejected",
    "RequesterLeft",
    "SamplerError",
    "SamplingParams",
    "SlotAction",
    "SlotAnswer",
    "SlotView",
    "Step",
    "ThinkTags",
    "Watched",
    "build_chain",
    "chain_seed",
    "greedy_pick",
    "sampler_order",
    "strict_json_strings",
    "wait_embeddings",
]
