"""The batch engine's records of itself: its counters and its step log.

Counters are rendered as llama-server's Prometheus metrics (``GET /metrics``);
names, help texts and definitions are llama-server's (``llamacpp:...``,
``server_metrics`` in ``tools/server/server-common.h``) so existing dashboards
and scripts read them alike.

The step log (``GET /engine/steps``) records, for each of the last steps, which
requests decoded a token, which prompt chunks were evaluated and which requests
ended. Fairness is proved from this, not from when chunks reach a client. A
bounded deque append per step: nothing next to a ``llama_decode``.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from workers.inference.engine._slots import Request, Slot, Timings
from workers.inference.engine._views import EngineStats, SlotView, Step


@dataclass
class Bucket:
    """Tokens, the decode steps they took and their time (llama-server's ``server_metrics::bucket``).
    The rate is over the steps, so that the free first token of a generation does not inflate it."""

    count: int = 0
    steps: int = 0
    seconds: float = 0.0

    def add(self, n: int, steps: int, seconds: float) -> None:
        self.count, self.steps, self.seconds = self.count + n, self.steps + steps, self.seconds + seconds

    def rate(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0


@dataclass
class EngineMetrics:
    """llama-server's ``server_metrics``: cumulative counters, and the two rate gauges' buckets, which
    each scrape empties (the gauges are averaged over the window between two scrapes, as there).

    Written by the engine thread, read and the buckets emptied by a scrape on an HTTP thread: the
    lock makes each update whole (uncontended: ~1 us per decode measured on a busy 2-core machine,
    next to a ``llama_decode`` of milliseconds)."""

    prompt: Bucket = field(default_factory=Bucket)  # prompt tokens evaluated (not reused from the cache)
    predict: Bucket = field(default_factory=Bucket)
    prompt_bucket: Bucket = field(default_factory=Bucket)  # since the last scrape
    predict_bucket: Bucket = field(default_factory=Bucket)
    prompt_tokens_cached: int = 0
    n_decode: int = 0
    n_busy_slots: int = 0  # summed over decode calls
    n_tokens_max: int = 0
    requests_finished: int = 0
    requests_preempted: int = 0  # modelrouter's: slots a full KV pool took back (engine._preempt)
    slot_moves: int = 0  # modelrouter's: running sequences moved beside the others (engine._compaction)
    n_draft_tokens: int = 0  # speculative decoding: tokens drafted, accepted, verifications
    n_draft_accepted: int = 0
    n_drafts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def on_admit(self, n_cached: int) -> None:
        with self._lock:
            self.prompt_tokens_cached += n_cached

    def on_prompt(self, n_tokens: int, seconds: float) -> None:
        """``n_tokens`` prompt tokens evaluated in ``seconds`` (a text batch's, an image's, an embedding's)."""
        if n_tokens:
            with self._lock:
                self.prompt.add(n_tokens, n_tokens, seconds)
                self.prompt_bucket.add(n_tokens, n_tokens, seconds)

    def on_decode(self, busy: int, longest_sequence: int) -> None:
        """One ``llama_decode`` of text or of embeddings (an image's decode is not counted, as in llama-server)."""
        with self._lock:
            self.n_decode += 1
            self.n_busy_slots += busy
            self.n_tokens_max = max(self.n_tokens_max, longest_sequence)

    def on_finish(self) -> None:
        """A request ended (not cancelled nor failed): ``instance_stats``' count."""
        self.requests_finished += 1  # the engine thread's alone

    def on_preempt(self) -> None:
        """A running request gave its slot back to a full KV pool, to go on later."""
        self.requests_preempted += 1  # the engine thread's alone

    def on_slot_move(self) -> None:
        """A running sequence moved into an idle slot, so the running slots make one ubatch."""
        self.slot_moves += 1  # the engine thread's alone

    def on_draft(self, drafted: int, accepted: int) -> None:
        """One verification of ``drafted`` tokens, ``accepted`` of them taken."""
        with self._lock:
            self.n_draft_tokens += drafted
            self.n_draft_accepted += accepted
            self.n_drafts += 1

    def on_release(self, t: Timings) -> None:
        """A request left its slot (finished, cancelled or failed): its generation is counted, as
        llama-server's ``metrics_on_prediction`` on a slot's reset."""
        if t.predicted_n:
            with self._lock:
                self.predict.add(t.predicted_n, t.gen_steps(), t.gen_seconds())
                self.predict_bucket.add(t.predicted_n, t.gen_steps(), t.gen_seconds())

    def summary(self, slots_total: int, slots_busy: int, queue_depth: int) -> EngineStats:
        """The load summary of ``instance_stats``: slots, queue, average throughputs (rounded)."""
        return {
            "slots_total": slots_total,
            "slots_busy": slots_busy,
            "queue_depth": queue_depth,
            "prefill_tokens_per_s": round(self.prompt.rate(), 1),
            "decode_tokens_per_s": round(self.predict.rate(), 1),
            "requests_finished": self.requests_finished,
        }

    def prometheus(self, processing: int, deferred: int) -> str:
        """The text exposition format, counters then gauges, as llama-server writes them (its values
        as C++ streams a double: six significant digits); empties the rate buckets."""
        with self._lock:
            prompt_rate, predicted_rate = self.prompt_bucket.rate(), self.predict_bucket.rate()
            self.prompt_bucket, self.predict_bucket = Bucket(), Bucket()
            counters = [
                ("prompt_tokens_total", _PROMPT_TOKENS, self.prompt.count),
                (
                    "prompt_tokens_cached_total",
                    "Number of prompt tokens reused from the cache",
                    self.prompt_tokens_cached,
                ),
                ("prompt_seconds_total", "Total time spent processing prompts", self.prompt.seconds),
                ("tokens_predicted_total", "Number of generation tokens processed", self.predict.count),
                ("tokens_predicted_seconds_total", "Total time spent generating tokens", self.predict.seconds),
                ("n_decode_total", _N_DECODE, self.n_decode),
                ("n_tokens_max", "Largest observed sequence length (prompt + generation)", self.n_tokens_max),
                (
                    "spec_decode_num_draft_tokens_total",
                    "Speculative: Total draft tokens generated",
                    self.n_draft_tokens,
                ),
                (
                    "spec_decode_num_accepted_tokens_total",
                    "Speculative: Total draft tokens accepted by the target model",
                    self.n_draft_accepted,
                ),
                (
                    "spec_decode_num_drafts_total",
                    "Speculative: Total speculative decoding verification steps",
                    self.n_drafts,
                ),
            ]
            gauges = [
                ("prompt_tokens_seconds", "Average prompt throughput in tokens/s", prompt_rate),
                ("predicted_tokens_seconds", "Average generation throughput in tokens/s", predicted_rate),
                ("requests_processing", "Number of requests processing", processing),
                ("requests_deferred", "Number of requests deferred", deferred),
                (
                    "n_busy_slots_per_decode",
                    "Average number of busy slots per llama_decode() call",
                    self.n_busy_slots / max(self.n_decode, 1),
                ),
            ]
        lines: list[str] = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, help_text, value in items:
                lines += [
                    f"# HELP llamacpp:{name} {help_text}",
                    f"# TYPE llamacpp:{name} {kind}",
                    f"llamacpp:{name} {float(value):g}",
                ]
        name = "modelrouter:requests_preempted_total"  # ours: llama-server has no preemption
        lines += [f"# HELP {name} {_PREEMPTED}", f"# TYPE {name} counter", f"{name} {self.requests_preempted:g}"]
        name = "modelrouter:slot_moves_total"
        lines += [f"# HELP {name} {_SLOT_MOVES}", f"# TYPE {name} counter", f"{name} {self.slot_moves:g}"]
        return "\n".join(lines) + "\n"


_PREEMPTED = "Number of running requests a full KV pool preempted (evaluated again later, their replies paused)"
_SLOT_MOVES = "Number of running sequences moved into an idle slot so the running slots decode as one ubatch"
_PROMPT_TOKENS = "Number of prompt tokens processed, excluding cached tokens"
_N_DECODE = "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"


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

    def add(self, decoded: list[int], prefilled: list[list[int]], rows: int) -> None:
        """One step: ``decoded`` request ids, ``prefilled`` ``[id, prompt length, tokens evaluated]``,
        ``rows`` of its ``llama_decode`` (drafted and pad rows included)."""
        self._n += 1
        step: Step = {"step": self._n, "decoded": decoded, "prefilled": prefilled, "ended": self._ended, "rows": rows}
        self._steps.append(step)
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
