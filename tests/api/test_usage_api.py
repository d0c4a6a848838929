"""``GET /usage`` through the real app over a seeded log (the service's own ``request_completed``
events are the e2e tests' business: tests/e2e/test_usage_service.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.api.principal import set_principal
from service.app import create_app
from service.core.keys import ADMIN, INFERENCE, KeyScope, Principal
from service.event_store.codec import new_event
from service.event_store.sync_store import SyncEventStore
from service.settings import Settings

A, B = "org/a-GGUF:Q4_K_M", "org/b-GGUF:Q4_K_M"
KEY = "sk-full-usage-test"


def _done(
    model: str, key: str | None, status: int, ms: float, prompt: int | None, completion: int | None
) -> Any:  # a table row
    data = {"instance_id": "i1", "route": "/v1/chat/completions", "status_code": status, "duration_ms": ms}
    data |= {"key": key, "prompt_tokens": prompt, "completion_tokens": completion}
    return new_event("request_completed", data, model=model)


SEEDED = [
    _done(A, "anonymous", 200, 10.0, 7, 3),
    _done(A, "alice", 200, 20.0, 5, 2),
    _done(A, "alice", 500, 30.0, None, None),
    _done(B, "api-key", 200, 40.0, 11, 4),
    _done(B, None, 404, 50.0, 2, 0),  # logged before issue 34: anonymous
]


def _seed(settings: Settings) -> None:
    store = SyncEventStore(settings.db_path, source={"kind": "test"})
    store.append([new_event("model_configured", {"aliases": ["bee"]}, model=B), *SEEDED])
    store.close()


async def _open(settings: Settings, caller: Principal | None = None, **headers: str) -> AsyncIterator[AsyncTestClient]:
    app = create_app(settings)

    async def as_caller(scope: Any, receive: Any, send: Any) -> None:
        """The caller in the request's scope, where the key middleware leaves it (i34-keys)."""
        if caller is not None and scope["type"] == "http":
            set_principal(scope, caller)
        await app(scope, receive, send)

    async with AsyncTestClient(app=as_caller) as c:
        _seed(settings)  # written by another "process" in one append: wait until its alias folds in
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = await c.get("/usage", params={"model": "bee"}, headers=headers)
            if answer.status_code == 200 and answer.json()["model"] == B:  # folded: the events are in
                break
            await asyncio.sleep(0.02)
        yield c


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient]:
    async for c in _open(settings):
        yield c


async def test_total_and_rows_by_key(client: AsyncTestClient) -> None:
    """Every request counts once; the old event without a key is anonymous's; 4xx and 5xx are errors."""
    body = (await client.get("/usage", params={"group_by": "key"})).json()
    rows = {row["group"]: row for row in body["rows"]}
    assert list(rows) == ["alice", "anonymous", "api-key"]
    assert (rows["alice"]["requests"], rows["alice"]["prompt_tokens"], rows["alice"]["errors"]) == (2, 5, 1)
    assert (rows["anonymous"]["requests"], rows["anonymous"]["completion_tokens"]) == (2, 3)
    total = body["total"]
    assert (total["requests"], total["prompt_tokens"], total["completion_tokens"], total["errors"]) == (5, 25, 9, 2)
    assert (total["p50_ms"], total["p95_ms"]) == (30.0, 50.0)
    assert (body["group_by"], body["key"]) == ("key", None)


async def test_filters_by_key_and_by_model_name_or_alias(client: AsyncTestClient) -> None:
    alice = (await client.get("/usage", params={"key": "alice"})).json()
    assert (alice["key"], alice["total"]["requests"], alice["rows"]) == ("alice", 2, [])
    bee = (await client.get("/usage", params={"model": "bee", "group_by": "model"})).json()
    assert bee["model"] == B
    assert [(r["group"], r["requests"]) for r in bee["rows"]] == [(B, 2)]
    gone = (await client.get("/usage", params={"model": "org/never-GGUF"})).json()
    assert gone["total"]["requests"] == 0


async def test_time_range_and_day_groups(client: AsyncTestClient) -> None:
    """``since`` relative or ISO; a range after the requests holds none of them."""
    recent = (await client.get("/usage", params={"since": "1h", "group_by": "day"})).json()
    assert sum(r["requests"] for r in recent["rows"]) == 5
    (day,) = recent["rows"]
    assert len(day["group"]) == len("2026-01-01")
    future = (await client.get("/usage", params={"since": "2999-01-01"})).json()
    assert (future["total"]["requests"], future["since"]) == (0, "2999-01-01T00:00:00.000000Z")
    past = (await client.get("/usage", params={"until": "2000-01-01T00:00:00Z", "group_by": "hour"})).json()
    assert (past["total"]["requests"], past["rows"]) == (0, [])


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"group_by": "week"}, "group_by"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-40"}, "until"),
        ({"key": ""}, "key"),
    ],
)
async def test_bad_parameters_are_400_naming_them(client: AsyncTestClient, params: dict[str, str], named: str) -> None:
    answer = await client.get("/usage", params=params)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert named in answer.text


async def test_a_full_key_sees_every_key(settings: Settings) -> None:
    """With ``--api-key``: the key is needed, and its holder sees everyone's usage."""
    keyed = dataclasses.replace(settings, api_keys=(KEY,))
    async for c in _open(keyed, authorization=f"Bearer {KEY}"):
        assert (await c.get("/usage")).status_code == 401
        body = (await c.get("/usage", params={"group_by": "key"}, headers={"authorization": f"Bearer {KEY}"})).json()
        assert {r["group"] for r in body["rows"]} == {"alice", "anonymous", "api-key"}


async def test_a_named_key_without_admin_sees_only_its_own(settings: Settings) -> None:
    """No ``key``: its own rows; another key's name: 403 naming the rule, not that key's numbers."""
    alice = Principal("alice", KeyScope(endpoints=(INFERENCE,)))
    async for c in _open(settings, alice):
        own = (await c.get("/usage", params={"group_by": "key"})).json()
        assert (own["key"], [r["group"] for r in own["rows"]], own["total"]["requests"]) == ("alice", ["alice"], 2)
        assert (await c.get("/usage", params={"key": "alice"})).json()["total"]["requests"] == 2
        refused = await c.get("/usage", params={"key": "anonymous", "group_by": "key"})
        assert refused.status_code == 403, refused.text
        body = refused.json()
        assert (body["type"], body["rule"]) == ("/problems/usage_not_allowed", "usage: own key only")
        assert "anonymous" not in refused.text


async def test_a_named_key_with_admin_sees_every_key(settings: Settings) -> None:
    ops = Principal("ops", KeyScope(endpoints=(INFERENCE, ADMIN)))
    async for c in _open(settings, ops):
        body = (await c.get("/usage", params={"group_by": "key"})).json()
        assert {r["group"] for r in body["rows"]} == {"alice", "anonymous", "api-key"}
        assert (await c.get("/usage", params={"key": "alice"})).json()["total"]["requests"] == 2
