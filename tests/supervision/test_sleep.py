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
