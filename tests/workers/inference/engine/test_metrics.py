"""A request's ``timings`` and the engine's ``/metrics`` counters, computed as llama-server computes them
(``server_slot_stats`` and ``server_metrics`` in ``tools/server/server-common.h``): the first generated
token is free (it comes from the last prompt batch's logits), so rates are over ``n - 1`` decode steps;
timings read right at any point of a request; the rate gauges cover the window since the last scrape."""

from __future__ import annotations

import pytest

from workers.inference.engine._metrics import EngineMetrics
from workers.inference.engine._slots import Timings


def _series(text: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in text.splitlines() if line.startswith("llamacpp:"))


class TestTimings:
    def test_a_request_not_yet_started_on_its_prompt_reads_zero_everywhere(self) -> None:
        """The first prompt-progress update is sent before any token is decoded: all zeros, no null."""
        assert set(Timings(cache_n=3, t_start=100.0).to_json().values()) == {0, 3}

    def test_prompt_time_advances_with_each_batch_and_generation_waits_for_a_token(self) -> None:
        t = Timings(t_start=100.0)
        t.on_prompt(32, 100.5)
        first = t.to_json()
        assert first["prompt_n"] == 32 and first["prompt_ms"] == pytest.approx(500.0)
        assert first["predicted_n"] == 0 and first["predicted_ms"] == 0.0 and first["predicted_per_second"] == 0.0
        t.on_prompt(8, 101.0)
        second = t.to_json()
        assert second["prompt_n"] == 40 and second["prompt_ms"] == pytest.approx(1000.0)
        assert second["prompt_per_second"] == pytest.approx(40.0) and second["prompt_per_token_ms"] == 25.0

    def test_one_token_has_no_generation_rate(self) -> None:
        """The first token's sampling ends the prompt's time; one token is no decode step."""
        t = Timings(t_start=100.0)
        t.on_prompt(4, 100.25)
        t.on_token(100.5)
        out = t.to_json()
        assert out["prompt_ms"] == pytest.approx(500.0), "up to the first token's sampling"
        assert out["predicted_n"] == 1 and out["predicted_ms"] == pytest.approx(0.001), "llama-server's 1 us floor"
        assert out["predicted_per_second"] == 0.0 and out["predicted_per_token_ms"] == 0.0

    def test_the_generation_rate_is_over_the_decode_steps_unrounded(self) -> None:
        t = Timings(t_start=100.0)
        t.on_prompt(4, 100.1)
        for i in range(16):
            t.on_token(100.2 + 0.0123457 * i)
        out = t.to_json()
        assert out["predicted_n"] == 16
        assert out["predicted_per_second"] == 1e3 / out["predicted_ms"] * 15, "15 steps, not 16 tokens"
        assert out["predicted_per_token_ms"] == out["predicted_ms"] / 15


class TestEngineMetrics:
    def test_counters_follow_the_requests_and_the_rate_gauges_empty_at_each_scrape(self) -> None:
        metrics = EngineMetrics()
        metrics.on_admit(5)
        metrics.on_prompt(40, 0.5)
        metrics.on_decode(busy=1, longest_sequence=45)
        t = Timings(t_start=1.0)
        t.on_prompt(40, 1.5)
        for i in range(9):
            t.on_token(2.0 + 0.25 * i)  # 8 steps in 2 s
        metrics.on_release(t)
        first = _series(metrics.prometheus(processing=0, deferred=0))
        assert first["llamacpp:prompt_tokens_total"] == "40" and first["llamacpp:prompt_tokens_cached_total"] == "5"
        assert (
            first["llamacpp:tokens_predicted_total"] == "9" and first["llamacpp:tokens_predicted_seconds_total"] == "2"
        )
        assert first["llamacpp:predicted_tokens_seconds"] == "4" and first["llamacpp:prompt_tokens_seconds"] == "80"
        assert first["llamacpp:n_decode_total"] == "1" and first["llamacpp:n_tokens_max"] == "45"
        assert first["llamacpp:spec_decode_num_drafts_total"] == "0"
        second = _series(metrics.prometheus(processing=1, deferred=2))
        assert second["llamacpp:predicted_tokens_seconds"] == "0" and second["llamacpp:prompt_tokens_seconds"] == "0"
        assert second["llamacpp:tokens_predicted_total"] == "9", "the counters are cumulative"
        assert second["llamacpp:requests_processing"] == "1" and second["llamacpp:requests_deferred"] == "2"

    def test_values_are_written_as_cpp_streams_a_double_and_every_series_has_help_and_type(self) -> None:
        metrics = EngineMetrics()
        metrics.on_prompt(1234567, 0.123456789)
        text = metrics.prometheus(processing=0, deferred=0)
        series = _series(text)
        assert series["llamacpp:prompt_tokens_total"] == "1.23457e+06"
        assert series["llamacpp:prompt_seconds_total"] == "0.123457"
        assert series["llamacpp:n_busy_slots_per_decode"] == "0", "no decode yet: divided by 1"
        for name in series:
            assert f"# HELP {name} " in text and f"# TYPE {name} " in text

    def test_a_request_that_generated_nothing_adds_no_generation(self) -> None:
        metrics = EngineMetrics()
        metrics.on_release(Timings(t_start=1.0, prompt_n=8, t_prompt_last=2.0))
        series = _series(metrics.prometheus(processing=0, deferred=0))
        assert series["llamacpp:tokens_predicted_total"] == "0"
        assert series["llamacpp:tokens_predicted_seconds_total"] == "0"
