"""Capacity queue, idle TTL, restart policy and load-on-startup, through the real service."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.supervision.conftest import StartService, events, model_entry, wait_for_event

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def _presets(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "presets.ini"
    path.write_text(text)
    return path


@pytest.mark.timeout(90)
def test_busy_model_is_not_evicted_and_waiters_queue_fifo(start_service: StartService) -> None:
    svc = start_service(modelrouter_models_max=1, modelrouter_queue_timeout=1.5)
    assert httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-a", **CHAT}, timeout=30).status_code == 200
    worker = model_entry(svc, "tiny-a")["status"]["instance"]["pid"]
    # Freeze the worker so a request to tiny-a stays in flight: tiny-a is busy.
    os.kill(worker, signal.SIGSTOP)
    results: list[int] = []
    holder = threading.Thread(
        target=lambda: results.append(
            httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-a", **CHAT}, timeout=60).status_code
        )
    )
    holder.start()
    try:
        deadline = time.monotonic() + 10
        while httpx.get(f"{svc.url}/health").json()["requests_in_flight"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        started = time.monotonic()
        blocked = httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-b", **CHAT}, timeout=30)
        assert blocked.status_code == 503 and blocked.json()["type"] == "/problems/capacity"
        assert 1.4 < time.monotonic() - started < 10
        assert events(svc, type="instance_stop_requested") == [], "a busy model must not be evicted"
        assert model_entry(svc, "tiny-a")["status"]["value"] == "loaded"
        # A client that gives up leaves the queue.
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-b", **CHAT}, timeout=0.3)
        time.sleep(0.3)
        assert httpx.get(f"{svc.url}/health").json()["queued_requests"] == 0
    finally:
        os.kill(worker, signal.SIGCONT)
        holder.join()
    assert results == [200]
    # Once idle, tiny-a gives its slot to tiny-b.
    answer = httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-b", **CHAT}, timeout=30)
    assert answer.status_code == 200
    assert [e["model"] for e in events(svc, type="instance_stop_requested")] == ["tiny-a"]


@pytest.mark.timeout(60)
def test_idle_ttl_unloads_with_reason_idle(start_service: StartService, tmp_path: Path) -> None:
    presets = _presets(tmp_path, "[tiny-a]\nttl = 1\n")
    svc = start_service(modelrouter_presets=presets)
    assert httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-a", **CHAT}, timeout=30).status_code == 200
    stop = wait_for_event(svc, "instance_stop_requested", timeout=10, model="tiny-a")
    assert stop["data"]["reason"] == "idle"
    wait_for_event(svc, "instance_stopped", timeout=10, model="tiny-a")
    assert model_entry(svc, "tiny-a")["status"]["value"] == "unloaded"


@pytest.mark.timeout(60)
def test_restart_on_failure_brings_a_crashed_model_back(start_service: StartService, tmp_path: Path) -> None:
    presets = _presets(tmp_path, "[tiny-a]\nrestart = on-failure\naliases = fast\n")
    svc = start_service(modelrouter_presets=presets)
    assert httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "fast", **CHAT}, timeout=30).status_code == 200
    assert model_entry(svc, "tiny-a")["aliases"] == ["fast"]
    pid = model_entry(svc, "tiny-a")["status"]["instance"]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for_event(svc, "instance_crashed", timeout=5, model="tiny-a")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        requested = events(svc, type="instance_requested", model="tiny-a")
        if requested[-1]["data"]["reason"] == "restart" and model_entry(svc, "tiny-a")["status"]["value"] == "loaded":
            break
        time.sleep(0.1)
    assert requested[-1]["data"]["reason"] == "restart"
    assert model_entry(svc, "tiny-a")["status"]["value"] == "loaded"


@pytest.mark.timeout(60)
def test_load_on_startup_and_presets_are_logged(start_service: StartService, tmp_path: Path) -> None:
    presets = _presets(tmp_path, "[tiny-b]\nload-on-startup = true\nn_ctx = 128\n")
    svc = start_service(modelrouter_presets=presets)
    wait_for_event(svc, "instance_ready", model="tiny-b")
    loading = events(svc, type="instance_loading", model="tiny-b")[0]
    assert loading["data"]["params"]["n_ctx"] == 128  # llama.cpp may pad the context it reports when ready
    configured = events(svc, type="model_configured", model="tiny-b")
    assert configured[0]["data"]["load_on_startup"] is True and configured[0]["data"]["params"] == {"n_ctx": 128}
    assert events(svc, type="instance_requested", model="tiny-b")[0]["data"]["reason"] == "startup"


@pytest.mark.timeout(60)
def test_embeddings_through_the_service(start_service: StartService, tmp_path: Path) -> None:
    import openai

    presets = _presets(tmp_path, "[tiny-a]\nembedding = true\n")
    svc = start_service(modelrouter_presets=presets)
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused")
    result = client.embeddings.create(model="tiny-a", input=["hello", "world"])
    assert len(result.data) == 2 and len(result.data[0].embedding) == 64
    assert result.data[0].embedding != result.data[1].embedding
    # Without embedding=true the worker refuses clearly (a 4xx passed through, not a 5xx).
    refused = httpx.post(f"{svc.url}/v1/embeddings", json={"model": "tiny-b", "input": "x"}, timeout=30)
    assert 400 <= refused.status_code < 500


@pytest.mark.timeout(60)
def test_load_timeout_kills_a_worker_that_never_gets_ready(start_service: StartService, tmp_path: Path) -> None:
    # A FIFO with no writer: the worker's first read of the "model" blocks forever.
    fifo = tmp_path / "hangs.gguf"
    os.mkfifo(fifo)
    presets = _presets(tmp_path, f"[hangs]\nmodel = {fifo}\n")
    svc = start_service(modelrouter_presets=presets, modelrouter_load_timeout=2)
    started = time.monotonic()
    answer = httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "hangs", **CHAT}, timeout=30)
    assert answer.status_code == 503 and "load_timeout" in answer.json()["detail"]
    assert 1.5 < time.monotonic() - started < 15
    failed = wait_for_event(svc, "instance_load_failed", model="hangs")
    assert failed["data"]["reason"] == "load_timeout" and failed["source"]["kind"] == "router"
    assert model_entry(svc, "hangs")["status"]["value"] == "failed"
    from tests.supervision.conftest import inference_children, still_running

    assert still_running(inference_children(svc), 5) == []
