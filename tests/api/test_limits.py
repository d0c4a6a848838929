"""Limits (issue 11 §3): each configurable, each answered with a clear problem, never a hang."""

from __future__ import annotations

import dataclasses
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from litestar.testing import AsyncTestClient

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from service.app import create_app
from service.settings import Settings
from tests.conftest_hub import unique_repo


def _settings(tmp_path: Path, **changes: object) -> Settings:
    return dataclasses.replace(Settings(home=tmp_path / "home"), **changes)  # type: ignore[arg-type]


async def test_control_and_inference_body_limits_are_separate(tmp_path: Path) -> None:
    settings = _settings(tmp_path, max_control_body_bytes=1000, max_body_bytes=5000)
    async with AsyncTestClient(app=create_app(settings)) as client:
        padding = "x" * 2000
        big_control = await client.post("/models/load", json={"model": "a/b", "pad": padding})
        assert big_control.status_code == 413
        body = big_control.json()
        assert body["type"] == "/problems/body_too_large" and body["limit"] == 1000 and "1000" in body["detail"]
        assert body["error"] == {"code": 413, "message": body["detail"], "type": "invalid_request_error"}
        # The same body is fine on an inference route (404: no such model, but it was read).
        chat = {"model": "a/b", "messages": [{"role": "user", "content": padding}]}
        assert (await client.post("/v1/chat/completions", json=chat)).status_code == 404
        chat["messages"] = [{"role": "user", "content": "x" * 6000}]
        too_big = await client.post("/v1/chat/completions", json=chat)
        assert too_big.status_code == 413 and too_big.json()["limit"] == 5000


def test_body_limits_come_from_the_environment(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "MODELROUTER_HOME": str(tmp_path),
            "MODELROUTER_MAX_BODY_BYTES": "123456",
            "MODELROUTER_MAX_CONTROL_BODY_BYTES": "2048",
            "MODELROUTER_MAX_STREAMS": "7",
            "MODELROUTER_DISK_RESERVE_BYTES": "0",
        }
    )
    assert (settings.max_body_bytes, settings.max_control_body_bytes) == (123456, 2048)
    assert (settings.max_streams, settings.disk_reserve_bytes) == (7, 0)
    with pytest.raises(ValueError, match="max_streams"):
        Settings(home=tmp_path, max_streams=-1)


@pytest.mark.timeout(90)
def test_streams_past_the_cap_get_503_with_retry_after(tmp_path: Path) -> None:
    with (
        ServiceProcess(tmp_path / "svc", env={"MODELROUTER_MAX_STREAMS": "2"}) as svc,
        httpx.Client(base_url=svc.url, timeout=30) as client,
        ExitStack() as streams,
    ):
        for path in ("/events/stream", "/models/sse"):
            answer = streams.enter_context(client.stream("GET", path))
            assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        assert client.get("/health").json()["open_streams"] == 2
        for path in ("/events/stream", "/models/sse"):
            refused = client.get(path)
            assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
            body = refused.json()
            assert body["type"] == "/problems/too_many_streams" and body["limit"] == 2
            assert body["error"]["type"] == "unavailable_error"
        streams.close()
        deadline = time.monotonic() + 30
        while client.get("/health").json()["open_streams"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.get("/health").json()["open_streams"] == 0
        with client.stream("GET", "/events/stream") as again:
            assert again.status_code == 200


@pytest.mark.timeout(90)
def test_a_download_that_would_eat_the_disk_reserve_is_507_before_it_starts(tmp_path: Path, hub: HubServer) -> None:
    repo = unique_repo("reserve")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 4096})
    env = {"HF_ENDPOINT": hub.url, "MODELROUTER_DISK_RESERVE_BYTES": str(10**18)}
    with ServiceProcess(tmp_path / "svc", env=env) as svc:
        answer = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30)
        assert answer.status_code == 507, answer.text
        body = answer.json()
        assert body["type"] == "/problems/disk_full" and body["reserve_bytes"] == 10**18
        assert body["needed_bytes"] == 4096 and body["free_bytes"] > 0
        assert str(10**18) in body["detail"] and body["error"]["type"] == "server_error"
        page = httpx.get(f"{svc.url}/events", params={"type": "download_*"}, timeout=10).json()
        assert page["events"] == [], "refused before any job or worker"
