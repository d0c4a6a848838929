"""``--metrics``, ``/slots`` and ``timings`` as llama-server computes them (issue 32, group 8): llama.cpp's
``tools/server/tests/unit/test_metrics.py`` and the metrics half of ``test_sleep.py``, on
``modelrouter serve -m FILE`` started with their command lines (``-c 512 -b 32``) on tiny real GGUFs.

Definitions from ``tools/server/server-common.h`` (``server_slot_stats``, ``server_metrics``) and
``server-context.cpp``: the first generated token costs no decode (it comes from the last prompt batch's
logits), so generation rates are over ``n - 1`` steps; the rate gauges are averaged over the window
between two scrapes; a released slot's stats are cleared; an embedding's prompt is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_bert, write_tiny_gguf
from tests.eventually import eventually
from tests.service_probes import events

LLAMA_ARGS = ("-c", "512", "-b", "32", "--metrics")  # ServerPreset.tinyllama2's, and test_metrics' switch
PROMPT = "the quick brown fox jumps over the lazy dog"  # more than one 32-token batch
RATES = ("llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("metrics-model") / "tiny.gguf", n_ctx=512)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, model: Path) -> Iterator[ServiceProcess]:
    """One slot (``-np 1``), so that a repeated prompt is served from that slot's cache."""
    proc = ServiceProcess(tmp_path_factory.mktemp("metrics-home"), args=("-m", str(model), "-np", "1", *LLAMA_ARGS))
    yield proc.start(timeout=120)
    proc.stop()


def _complete(svc: ServiceProcess, prompt: str, n_predict: int) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True}
    answer = httpx.post(f"{svc.url}/completion", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _scrape(svc: ServiceProcess) -> tuple[dict[str, float], str]:
    """The ``llamacpp:*`` series (each with its ``# TYPE`` line, as test_metrics' parser demands) and
    their lines as sent."""
    answer = httpx.get(f"{svc.url}/metrics", timeout=30)
    assert answer.status_code == 200 and "Process-Start-Time-Unix" in answer.headers
    lines = [line for line in answer.text.splitlines() if line.startswith("llamacpp:")]
    series = {name: float(value) for name, value in (line.split(" ", 1) for line in lines)}
    assert all(f"# TYPE {name} " in answer.text and f"# HELP {name} " in answer.text for name in series)
    return series, "\n".join(lines)


def test_the_generation_rate_excludes_the_first_token(svc: ServiceProcess) -> None:
    """One token: no decode step, no rate. Sixteen: the rate is over 15 steps, to the last bit."""
    one = _complete(svc, "I believe", 1)["timings"]
    assert one["predicted_n"] == 1 and one["predicted_per_second"] == 0.0 and one["predicted_per_token_ms"] == 0.0
    many = _complete(svc, "I believe", 16)["timings"]
    assert many["predicted_n"] == 16
    assert abs(many["predicted_per_second"] - 1e3 / many["predicted_ms"] * 15) < 1e-6
    assert abs(many["predicted_per_token_ms"] - many["predicted_ms"] / 15) < 1e-9
    fresh = _complete(svc, "a prompt no slot holds yet", 8)["timings"]  # "I believe" came from the cache
    assert all(value is not None and value >= 0 for value in [*many.values(), *fresh.values()])
    assert fresh["prompt_ms"] > 0 and fresh["prompt_per_token_ms"] > 0


def test_counters_match_the_requests_and_the_rates_cover_the_window_between_scrapes(svc: ServiceProcess) -> None:
    """Over the requests made between two scrapes, the counters grow by what their ``timings`` say
    (prompt tokens evaluated, reused from the cache, generated); the rate gauges report that window
    once; the speculative counters are there (0: no draft model)."""
    before, _ = _scrape(svc)
    timings = [_complete(svc, PROMPT, n)["timings"] for n in (1, 4, 16)]
    assert timings[1]["cache_n"] > 0, "the repeated prompt is served from the slot's cache"
    after, _ = _scrape(svc)

    def grew(name: str) -> float:
        return after[f"llamacpp:{name}"] - before[f"llamacpp:{name}"]

    assert grew("prompt_tokens_total") == sum(t["prompt_n"] for t in timings)
    assert grew("prompt_tokens_cached_total") == sum(t["cache_n"] for t in timings)
    assert grew("tokens_predicted_total") == sum(t["predicted_n"] for t in timings) == 21
    assert grew("n_decode_total") >= 1 + 4 + 16 - 3, "a decode per step after each first token"
    assert after["llamacpp:requests_processing"] == 0 and after["llamacpp:requests_deferred"] == 0
    assert after["llamacpp:spec_decode_num_draft_tokens_total"] == 0
    assert after["llamacpp:predicted_tokens_seconds"] > 0 and after["llamacpp:prompt_tokens_seconds"] > 0
    again, _ = _scrape(svc)
    assert [again[name] for name in RATES] == [0, 0], "nothing ran since the last scrape"


def test_an_idle_slot_keeps_nothing_of_its_last_request(svc: ServiceProcess) -> None:
    """``server_slot::reset()``: a released slot's stats are cleared (``n_remain`` -1, 0 decoded), its
    last request's parameters stay."""
    _complete(svc, "I believe", 8)
    (slot,) = httpx.get(f"{svc.url}/slots", timeout=30).json()
    assert slot["is_processing"] is False and slot["params"]["n_predict"] == 8
    assert slot["next_token"][0]["n_remain"] == -1 and slot["next_token"][0]["n_decoded"] == 0
    assert slot["next_token"][0]["has_new_line"] is False
    assert slot["n_prompt_tokens_processed"] == 0 and slot["n_prompt_tokens_cache"] == 0


def test_an_embedding_prompt_is_counted(tmp_path: Path) -> None:
    """No token sampled, but the prompt cost a decode: counted as prompt tokens and a decode."""
    bert = write_tiny_bert(tmp_path / "bert.gguf")
    with ServiceProcess(tmp_path / "home", args=("-m", str(bert), "--embedding", "--metrics")) as svc:
        answer = httpx.post(f"{svc.url}/v1/embeddings", json={"input": ["hello world", "goodbye world"]}, timeout=120)
        assert answer.status_code == 200, answer.text
        series, _ = _scrape(svc)
    assert series["llamacpp:prompt_tokens_total"] == answer.json()["usage"]["prompt_tokens"] > 0
    assert series["llamacpp:n_decode_total"] > 0 and series["llamacpp:tokens_predicted_total"] == 0


@pytest.mark.timeout(240)
def test_a_sleeping_model_reports_its_last_window_once_and_waking_does_not_report_it_again(
    tmp_path: Path, model: Path
) -> None:
    """``--sleep-idle-seconds 1``: the first scrape while asleep reports the last generation's rates, the
    next ones 0 with every other ``llamacpp:*`` series as it was; scrapes do not wake it, ``/tokenize``
    does, and the woken model's rates are 0 too (test_sleep.py's ``test_server_sleep_metrics_buckets``)."""
    args = ("-m", str(model), "--sleep-idle-seconds", "1", *LLAMA_ARGS)
    with ServiceProcess(tmp_path / "home", args=args) as svc:
        _complete(svc, "Hello", 8)

        def sleeping() -> bool:
            return bool(httpx.get(f"{svc.url}/props", timeout=30).json()["is_sleeping"])

        eventually(sleeping, "the model asleep", timeout=90, interval=0.1)
        first, _ = _scrape(svc)
        assert first["llamacpp:predicted_tokens_seconds"] > 0 and first["llamacpp:tokens_predicted_total"] == 8
        second, second_lines = _scrape(svc)
        assert [second[name] for name in RATES] == [0, 0]
        assert {k: v for k, v in second.items() if k not in RATES} == {k: v for k, v in first.items() if k not in RATES}
        assert _scrape(svc)[1] == second_lines, (
            "asleep, every scrape is the same (test_server_sleep_read_only_endpoints)"
        )
        assert sleeping(), "scraping /metrics does not wake it"
        asleep = len(events(svc, type="instance_requested"))
        assert httpx.post(f"{svc.url}/tokenize", json={"content": "Hello"}, timeout=120).status_code == 200
        woke = [e["data"]["reason"] for e in events(svc, type="instance_requested")][asleep:]
        assert woke == ["wake"], "it woke (read from the log: it may sleep again a second later)"
        woken, _ = _scrape(svc)
        assert woken["llamacpp:predicted_tokens_seconds"] == 0
