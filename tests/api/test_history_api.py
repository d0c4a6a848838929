"""``GET /models/{id}/history`` through the real app over a seeded log."""

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

M = "org/a-GGUF:Q4_K_M"
FILES = [{"path": "a-Q4_K_M.gguf", "size": 10, "sha256": "ab" * 32}]


def _seed(settings: Settings) -> None:
    store = SyncEventStore(settings.db_path, source={"kind": "test"})
    job = {"job_id": "j1", "commit": "c" * 40}
    store.append(
        [
            new_event("model_configured", {"aliases": ["shorty"]}, model=M),
            new_event(
                "download_requested",
                {**job, "repo": "org/a-GGUF", "quant": "Q4_K_M", "files": FILES, "total_bytes": 10},
                model=M,
            ),
            new_event("download_progress", {"job_id": "j1", "bytes_done": 5, "bytes_total": 10}, model=M),
            new_event(
                "download_finished",
                {**job, "bytes_total": 10, "bytes_transferred": 10, "duration_ms": 1.0, "files": FILES},
                model=M,
            ),
        ]
    )
    store.close()


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=create_app(settings)) as c:
        _seed(settings)  # written by another "process": wait for the tail to fold it
        deadline = time.monotonic() + 30
        while (await c.get(f"/models/{M}/history")).status_code != 200 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        yield c


@pytest.mark.parametrize("name", [M, "shorty", "org/a-GGUF"])  # user/repo: the only quant
async def test_history_by_name_alias_or_short_name(client: AsyncTestClient, name: str) -> None:
    """The id resolves as elsewhere; the finished download is on the timeline."""
    answer = await client.get(f"/models/{name}/history")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["model"] == M
    (job,) = body["downloads"]
    assert (job["job_id"], job["outcome"], job["bytes_done"], job["quant"]) == ("j1", "finished", 10, "Q4_K_M")
    assert (body["loads"], body["restarts"], body["crashes"]) == ([], 0, 0)


@pytest.mark.parametrize(
    "path", ["/models/nobody/nothing/history", "/models/org/a-GGUF:Q4_K_M/histories", "/models/history"]
)
async def test_unknown_model_or_path_is_a_404_problem(client: AsyncTestClient, path: str) -> None:
    answer = await client.get(path)
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["status"] == 404


async def test_other_routes_under_models_still_answer(client: AsyncTestClient) -> None:
    """The catch-all history route does not shadow /models or /models/load."""
    assert (await client.get("/models")).status_code == 200
    assert (await client.get("/models/load")).status_code == 405


async def test_an_ambiguous_short_name_is_a_409_naming_the_quants(client: AsyncTestClient, settings: Settings) -> None:
    other = "org/a-GGUF:Q8_0"
    store = SyncEventStore(settings.db_path, source={"kind": "test"})
    job = {"job_id": "j2", "commit": "c" * 40}
    files = [{"path": "a-Q8_0.gguf", "size": 10, "sha256": "cd" * 32}]
    store.append(
        [
            new_event(
                "download_requested", {**job, "repo": "org/a-GGUF", "files": files, "total_bytes": 10}, model=other
            ),
            new_event(
                "download_finished",
                {**job, "bytes_total": 10, "bytes_transferred": 10, "duration_ms": 1.0, "files": files},
                model=other,
            ),
        ]
    )
    store.close()
    deadline = time.monotonic() + 30
    while (await client.get(f"/models/{other}/history")).status_code != 200 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    answer = await client.get("/models/org/a-GGUF/history")
    assert answer.status_code == 409
    assert M in answer.text and other in answer.text
