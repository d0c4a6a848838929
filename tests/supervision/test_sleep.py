"""What a sleeping model's worker last answered on ``/props`` and ``/metrics``
(:mod:`service.supervision.sleep`), read over real HTTP from a loopback server standing in for the worker."""

from __future__ import annotations

import json

import httpx

from service.supervision.ports import free_port
from service.supervision.sleep import SleepSnapshots
from tests.supervision.worker_answers import answering

PROPS = {"model_alias": "m", "is_sleeping": False, "total_slots": 1}
METRICS = b"llamacpp:prompt_tokens_total 12\n"


async def test_props_and_metrics_are_kept_as_the_worker_answered_with_is_sleeping_set() -> None:
    routes = {"/props": (200, json.dumps(PROPS).encode()), "/metrics": (200, METRICS)}
    async with httpx.AsyncClient() as http:
        snapshots = SleepSnapshots(http)
        with answering(routes) as worker:
            await snapshots.take("m", worker)
        assert snapshots.props("m") == {**PROPS, "is_sleeping": True}
        assert snapshots.metrics("m") == METRICS
        assert snapshots.props("other") is None and snapshots.metrics("other") is None


async def test_an_answer_that_is_not_200_is_not_kept() -> None:
    routes = {"/props": (503, b"{}"), "/metrics": (501, b"metrics are off")}  # llama-server without --metrics
    async with httpx.AsyncClient() as http:
        snapshots = SleepSnapshots(http)
        with answering(routes) as worker:
            await snapshots.take("m", worker)
        assert snapshots.props("m") is None and snapshots.metrics("m") is None


async def test_a_worker_that_is_gone_or_answers_garbage_leaves_nothing_and_raises_nothing() -> None:
    async with httpx.AsyncClient() as http:
        snapshots = SleepSnapshots(http)
        await snapshots.take("gone", f"http://127.0.0.1:{free_port()}")
        with answering({"/props": (200, b"not json"), "/metrics": (200, METRICS)}) as worker:
            await snapshots.take("garbled", worker)
        assert [snapshots.props(m) for m in ("gone", "garbled")] == [None, None]
        assert snapshots.metrics("gone") is None


async def test_a_scrape_reports_the_rate_gauges_once_then_an_empty_window() -> None:
    """llama-server's sleeping ``/metrics``: the first scrape reports the last generation's rates, the
    next ones 0 (nothing runs while it sleeps); every other series is unchanged."""
    text = (
        b"# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 8\n"
        b"# TYPE llamacpp:prompt_tokens_seconds gauge\nllamacpp:prompt_tokens_seconds 1234.5\n"
        b"# TYPE llamacpp:predicted_tokens_seconds gauge\nllamacpp:predicted_tokens_seconds 99.25\n"
    )
    async with httpx.AsyncClient() as http:
        snapshots = SleepSnapshots(http)
        with answering({"/props": (200, json.dumps(PROPS).encode()), "/metrics": (200, text)}) as worker:
            await snapshots.take("m", worker)
        assert snapshots.scrape("m") == text
        emptied = text.replace(b"1234.5", b"0").replace(b"99.25", b"0")
        assert snapshots.scrape("m") == emptied and snapshots.scrape("m") == emptied
        assert snapshots.metrics("m") == emptied and snapshots.scrape("other") is None
