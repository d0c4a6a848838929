"""Counters of the batch engine, rendered as llama-server's Prometheus metrics (``GET /metrics``).

Names are llama-server's (``llamacpp:...``) so existing dashboards work. The
counters are plain ints updated by the engine thread only; a scrape may read
them mid-step, which is fine for monotonic counters.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers._slots import Timings


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
            ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             _rate(self.n_busy_slots, self.n_decode)),
        ]  # fmt: skip
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
