"""``GET /metrics`` (the router's own): real service, real download and inference
workers, the project's Hub. The text parses with prometheus_client's own parser,
and each counter moves when the events it counts happen."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.api.metrics_scrape import scrape, value, wait_metric
from tests.conftest_hub import unique_repo
from tests.e2e.conftest import models_dir

__all__ = ["models_dir"]
KEY = "sk-metrics-test-0123456789"


@pytest.fixture
def svc(hub: HubServer, tmp_path: Path, models_dir: Path) -> Iterator[ServiceProcess]:
    env = {"HF_ENDPOINT": hub.url, "MODELROUTER_MODELS_DIR": str(models_dir), "MODELROUTER_METRICS": "1"}
    with ServiceProcess(tmp_path / "home", env=env) as proc:
        yield proc


@pytest.mark.timeout(180)
def test_counters_move_as_events_happen(svc: ServiceProcess, hub: HubServer, tmp_path: Path) -> None:
    start = scrape(svc)
    assert value(start, "modelrouter_downloads_total", outcome="finished") == 0
    assert value(start, "modelrouter_loads_total", outcome="ready") == 0
    assert value(start, "modelrouter_models", status="unloaded") >= 2  # tiny-a, tiny-b (broken ones fail)
    assert value(start, "modelrouter_tail_up") == 1
    health = httpx.get(f"{svc.url}/health", timeout=10).json()
    assert value(start, "modelrouter_event_log_position") >= health["position"] - 1 >= 0

    repo = unique_repo("metrics")
    gguf = write_tiny_gguf(tmp_path / "m.gguf").read_bytes()
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": gguf})
    job = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30).json()
    done = wait_metric(svc, lambda s: value(s, "modelrouter_downloads_total", outcome="finished") == 1, "download")
    assert value(done, "modelrouter_download_bytes_total") == len(gguf)
    assert value(done, "modelrouter_download_jobs", status="finished") == 1

    chat = {"model": job["model"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert httpx.post(f"{svc.url}/v1/chat/completions", json=chat, timeout=60).status_code == 200
    served = wait_metric(
        svc,
        lambda s: value(s, "modelrouter_proxied_requests_total", route="/v1/chat/completions", status="200") == 1,
        "a proxied request counted",
    )
    assert value(served, "modelrouter_loads_total", outcome="ready") == 1
    assert value(served, "modelrouter_load_duration_seconds_count") == 1
    assert value(served, "modelrouter_load_duration_seconds_sum") > 0
    assert value(served, "modelrouter_queue_wait_seconds_count") == 1
    assert value(served, "modelrouter_proxied_request_duration_seconds_count", route="/v1/chat/completions") == 1
    assert value(served, "modelrouter_models", status="loaded") == 1
    assert value(served, "modelrouter_instances", status="ready") == 1
    assert value(served, "modelrouter_requests_in_flight") == 0

    assert httpx.post(f"{svc.url}/models/unload", json={"model": job["model"]}, timeout=30).status_code == 200
    stopped = wait_metric(svc, lambda s: value(s, "modelrouter_instance_stops_total", reason="unload") == 1, "unload")
    assert value(stopped, "modelrouter_instances", status="ready") == 0
    assert value(stopped, "modelrouter_event_log_position") > value(start, "modelrouter_event_log_position")


@pytest.mark.timeout(60)
def test_metrics_need_the_api_key(tmp_path: Path) -> None:
    with ServiceProcess(tmp_path / "home", args=["--api-key", KEY, "--metrics"]) as svc:
        assert httpx.get(f"{svc.url}/metrics", timeout=10).status_code == 401
        assert value(scrape(svc, Authorization=f"Bearer {KEY}"), "modelrouter_tail_up") == 1
