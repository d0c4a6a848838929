"""The batch engine's records of itself: its counters and its step log.

Counters are rendered as llama-server's Prometheus metrics (``GET /metrics``);
names are llama-server's (``llamacpp:...``) so existing dashboards work. The
counters are plain ints updated by the engine thread only; a scrape may read
them mid-step, which is fine for monotonic counters.

The step log (``GET /engine/steps``) records, for each of the last steps, which
requests decoded a token, which prompt chunks were evaluated and which requests
ended. Fairness is proved from this, not from when chunks reach a client. A
bounded deque append per step: nothing next to a ``llama_decode``.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from workers.inference.engine._slots import Request, Slot, Timings
from workers.inference.engine._views import EngineStats, SlotView, Step


@dataclass
class EngineMetrics:
    prompt_tokens: int = 0  # prompt tokens evaluated (not reused from the cache)
    prompt_tokens_cached: int = 0
    prompt_seconds: float = 0.0
    tokens_predicted: int = 0
    predicted_seconds: float = 0.0
    n_decode: int = 0
    n_busy_slots: int = 0  # summed over decode calls
    n_tokens_max: int = 0
    requests_finished: int = 0

    def on_admit(self, n_cached: int) -> None:
        self.prompt_tokens_cached += n_cached

    def on_decode(self, n_tokens: int, busy: int) -> None:
        self.n_decode += 1
        self.n_busy_slots += busy

    def on_finish(self, t: Timings, longest_sequence: int) -> None:
        self.requests_finished += 1
        self.prompt_seconds += max(t.t_prompt_done - t.t_start, 0.0)
        self.predicted_seconds += max(t.t_end - t.t_prompt_done, 0.0)
        self.n_tokens_max = max(self.n_tokens_max, longest_sequence)

    def summary(self, slots_total: int, slots_busy: int, queue_depth: int) -> EngineStats:
        """The load summary of ``instance_stats``: slots, queue, average throughputs (rounded)."""
        return {
            "slots_total": slots_total,
            "slots_busy": slots_busy,
            "queue_depth": queue_depth,
            "prefill_tokens_per_s": _per_s(self.prompt_tokens, self.prompt_seconds),
            "decode_tokens_per_s": _per_s(self.tokens_predicted, self.predicted_seconds),
            "requests_finished": self.requests_finished,
        }

    def prometheus(self, processing: int, deferred: int) -> str:
        """The text exposition format, counters then gauges, as llama-server writes them."""
        counters = [
            ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", self.prompt_tokens),
            ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", self.prompt_tokens_cached),
            ("prompt_seconds_total", "Total time spent processing prompts", self.prompt_seconds),
            ("tokens_predicted_total", "Number of generation tokens processed", self.tokens_predicted),
            ("tokens_predicted_seconds_total", "Total time spent generating tokens", self.predicted_seconds),
            ("n_decode_total", "Total number of llama_decode() calls", self.n_decode),
            ("n_tokens_max", "Largest observed sequence length (prompt + generation)", self.n_tokens_max),
        ]
        prompt_rate = _rate(self.prompt_tokens, self.prompt_seconds)
        predicted_rate = _rate(self.tokens_predicted, self.predicted_seconds)
        gauges = [
            ("prompt_tokens_seconds", "Average prompt throughput in tokens/s", prompt_rate),
            ("predicted_tokens_seconds", "Average generation throughput in tokens/s", predicted_rate),
            ("requests_processing", "Number of requests processing", processing),
            ("requests_deferred", "Number of requests deferred", deferred),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per llama_decode() call",
                _rate(self.n_busy_slots, self.n_decode),
            ),
        ]
        lines: list[str] = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, help_text, value in items:
                lines += [
                    f"# HELP llamacpp:{name} {help_text}",
                    f"# TYPE llamacpp:{name} {kind}",
                    f"llamacpp:{name} {value}",
                ]
        return "\n".join(lines) + "\n"


def _rate(n: float, seconds: float) -> float:
    return round(n / seconds, 3) if seconds > 0 else 0.0


def _per_s(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else 0.0


STEP_LOG = 8192
"""Steps kept in the step log: a few seconds of a busy engine."""


class StepLog:
    """The last :data:`STEP_LOG` steps, oldest first (see the module docstring).

    Written by the engine thread; the engine holds its lock around :meth:`add`
    and :meth:`json`, since HTTP threads read the log."""

    def __init__(self, size: int = STEP_LOG) -> None:
        self._steps: deque[Step] = deque(maxlen=size)
        self._n = 0
        self._ended: list[int] = []

    def ended(self, request_id: int) -> None:
        """``request_id`` left its slot; recorded with the next step."""
        self._ended.append(request_id)

    def add(self, decoded: list[int], prefilled: list[list[int]]) -> None:
        """One step: ``decoded`` request ids, ``prefilled`` ``[id, prompt length, tokens evaluated]``."""
        self._n += 1
        self._steps.append({"step": self._n, "decoded": decoded, "prefilled": prefilled, "ended": self._ended})
        self._ended = []

    def json(self) -> list[Step]:
        return list(self._steps)


class EngineMonitorMixin:
    """The batch engine's live state as its monitor shows it (``GET /slots``, ``/engine/steps``,
    ``/metrics``, ``instance_stats``), read under the engine's lock."""

    slots: list[Slot]
    metrics: EngineMetrics
    step_log: StepLog
    _cv: threading.Condition
    _pending: deque[Request]

    def slots_json(self) -> list[SlotView]:
        with self._cv:
            return [s.to_json() for s in self.slots]

    def steps_json(self) -> list[Step]:
        """The step log, oldest first (``decoded``: request ids; ``prefilled``: ``[id, prompt length,
        tokens evaluated]``; ``ended``: requests released in or before that step)."""
        with self._cv:
            return self.step_log.json()

    def stats(self) -> EngineStats:
        """The load summary of ``instance_stats``: slots, queue, average throughputs (rounded)."""
        with self._cv:
            busy, queued = sum(1 for s in self.slots if s.is_processing), len(self._pending)
        return self.metrics.summary(len(self.slots), busy, queued)

    def metrics_text(self) -> str:
        """``GET /metrics``: llama-server's Prometheus metrics."""
        processing = sum(1 for s in self.slots if s.is_processing)
        return self.metrics.prometheus(processing, len(self._pending))
