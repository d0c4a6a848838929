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
from service.api import create_app
from service.core.disk_budget import check_disk
from service.core.state import DownloadJob, JobStatus, ModelState, RouterState
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


def _job(job_id: str, model: str, status: JobStatus, done: int, total: int) -> DownloadJob:
    return DownloadJob(job_id=job_id, model=model, status=status, bytes_done=done, bytes_total=total)


def _state(*jobs: DownloadJob) -> RouterState:
    models = {
        j.model: ModelState(name=j.model, jobs={j.job_id: j}, active_job=j.job_id if j.status.active else None)
        for j in jobs
    }
    return RouterState(models=models, job_index={j.job_id: j.model for j in jobs})


class TestDiskBudget:
    def test_fits_when_the_reserve_stays_free(self) -> None:
        assert check_disk(_state(), "m", total_bytes=100, on_disk=0, free=1100, reserve=1000) is None

    def test_refused_when_it_would_eat_into_the_reserve(self) -> None:
        short = check_disk(_state(), "m", total_bytes=101, on_disk=0, free=1100, reserve=1000)
        assert short is not None and (short.needed, short.free, short.reserve) == (101, 1100, 1000)
        assert "101" in short.message and "1000" in short.message

    def test_bytes_already_on_disk_are_not_counted_again(self) -> None:
        assert check_disk(_state(), "m", total_bytes=500, on_disk=450, free=1100, reserve=1000) is None
        assert check_disk(_state(), "m", total_bytes=500, on_disk=500, free=0, reserve=1000) is None

    def test_other_running_downloads_still_need_their_bytes(self) -> None:
        other = _job("j1", "o", JobStatus.RUNNING, done=100, total=400)
        short = check_disk(_state(other), "m", total_bytes=100, on_disk=0, free=1350, reserve=1000)
        assert short is not None and short.pending == 300
        ended = _job("j1", "o", JobStatus.FINISHED, done=100, total=400)
        assert check_disk(_state(ended), "m", total_bytes=100, on_disk=0, free=1350, reserve=1000) is None

    def test_joining_a_running_job_is_never_refused(self) -> None:
        running = _job("j1", "m", JobStatus.RUNNING, done=0, total=10**12)
        assert check_disk(_state(running), "m", total_bytes=10**12, on_disk=0, free=0, reserve=10**9) is None


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
