"""``GET /events``, ``GET /models``, ``/health`` and ``/schema`` through the real app."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.event_store.codec import new_event
from service.event_store.sync_store import SyncEventStore
from service.settings import Settings


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=create_app(settings)) as c:
        yield c


def _seed(settings: Settings) -> None:
    store = SyncEventStore(settings.db_path, source={"kind": "test"})
    store.append(
        [
            new_event(
                "download_requested",
                {"job_id": "j1", "repo": "org/a", "commit": "c" * 40, "files": [], "total_bytes": 10},
                model="org/a:Q4_K_M",
            ),
            new_event("download_progress", {"job_id": "j1", "bytes_done": 5, "bytes_total": 10}, model="org/a:Q4_K_M"),
            new_event(
                "download_finished",
                {
                    "job_id": "j1",
                    "commit": "c" * 40,
                    "bytes_total": 10,
                    "bytes_transferred": 10,
                    "duration_ms": 1.0,
                    "files": [{"path": "a-Q4_K_M.gguf", "size": 10}],
                },
                model="org/a:Q4_K_M",
            ),
            new_event("instance_requested", {"instance_id": "i1", "port": 9000}, model="org/a:Q4_K_M"),
        ]
    )
    store.close()


BAD_QUERIES = [
    "since=yesterday",
    "until=2026-13-45",
    "limit=-1",
    "limit=0",
    "limit=1001",
    "limit=ten",
    "after=abc",
    "before=-5",
    "after=1.5",
    "type=down*load",
    "after=1&after=2",
]


@pytest.mark.parametrize("query", BAD_QUERIES)
async def test_bad_input_is_400_problem_json(client: AsyncTestClient, query: str) -> None:
    answer = await client.get(f"/events?{query}")
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("application/problem+json")
    body = answer.json()
    assert body["status"] == 400 and body["type"] == "/problems/invalid_request" and body["detail"]


async def test_filters_and_paging(client: AsyncTestClient, settings: Settings) -> None:
    _seed(settings)
    await client.get("/health")
    all_events = (await client.get("/events?limit=1000")).json()["events"]
    assert [e["type"] for e in all_events][:1] == ["router_started"]
    downloads = (await client.get("/events?type=download_*")).json()["events"]
    assert [e["type"] for e in downloads] == ["download_requested", "download_progress", "download_finished"]
    assert {e["model"] for e in downloads} == {"org/a:Q4_K_M"}
    first = downloads[0]
    assert set(first) >= {"position", "id", "type", "model", "data", "source", "recorded_at"}
    page = (await client.get("/events?limit=2")).json()
    assert len(page["events"]) == 2 and page["next_after"] == page["events"][-1]["position"]
    nxt = (await client.get(f"/events?limit=2&after={page['next_after']}")).json()
    assert nxt["events"][0]["position"] == page["next_after"] + 1
    several = (await client.get("/events?type=download_requested&type=instance_requested")).json()["events"]
    assert [e["type"] for e in several] == ["download_requested", "instance_requested"]
    assert (await client.get("/events?model=nobody")).json() == {"events": [], "next_after": None}
    window = (await client.get("/events", params={"since": "2000-01-01T00:00:00Z", "until": "2000-01-02"})).json()
    assert window["events"] == []
    now_window = (await client.get("/events", params={"since": first["recorded_at"], "type": "download_*"})).json()
    assert len(now_window["events"]) == 3


async def test_models_shape_comes_from_the_fold(client: AsyncTestClient, settings: Settings) -> None:
    _seed(settings)
    # The seed was written by another "process"; wait for the tail to fold it.
    deadline = time.monotonic() + 30
    while not (body := (await client.get("/v1/models")).json())["data"] and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert body["object"] == "list"
    (entry,) = body["data"]
    assert entry["id"] == "org/a:Q4_K_M" and entry["object"] == "model" and entry["owned_by"] == "modelrouter"
    assert isinstance(entry["created"], int)
    assert entry["status"]["value"] == "loading"
    assert (await client.get("/models")).json() == body


async def test_health_and_openapi(client: AsyncTestClient) -> None:
    health = (await client.get("/health")).json()
    assert health["status"] == "ok" and health["position"] >= 1
    schema = await client.get("/schema/openapi.json")
    assert schema.status_code == 200
    assert "/events" in schema.json()["paths"]


async def test_unknown_route_is_problem_json(client: AsyncTestClient) -> None:
    answer = await client.get("/nowhere")
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/problem+json")


async def test_request_id_is_echoed_or_made_up(client: AsyncTestClient) -> None:
    given = await client.get("/health", headers={"X-Request-ID": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    made = await client.get("/health")
    assert len(made.headers["x-request-id"]) == 32
