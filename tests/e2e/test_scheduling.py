"""Capacity queue, idle TTL, restart policy and load-on-startup, through the real service."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from devtools.service_process import ServiceProcess
from tests.e2e.conftest import StartService
from tests.eventually import eventually
from tests.service_probes import events, model_entry, wait_for_event

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def _presets(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "presets.ini"
    path.write_text(text)
    return path


def _health_reaches(svc: ServiceProcess, key: str, value: int, timeout: float = 30.0) -> None:
    eventually(
        lambda: httpx.get(f"{svc.url}/health", timeout=10).json()[key] == value,
        f"/health {key} to reach {value}",
        timeout=timeout,
        interval=0.02,
    )


@contextmanager
def _busy(svc: ServiceProcess, model: str) -> Iterator[list[int]]:
    """``model`` loaded, its worker frozen (SIGSTOP) with one request in flight: busy, so never evicted.
    Yields the list that receives that request's status once the worker is thawed on exit."""
    assert httpx.post(f"{svc.url}/v1/chat/completions", json={"model": model, **CHAT}, timeout=30).status_code == 200
    worker = model_entry(svc, model)["status"]["instance"]["pid"]
    os.kill(worker, signal.SIGSTOP)
    results: list[int] = []
    holder = threading.Thread(
        target=lambda: results.append(
            httpx.post(f"{svc.url}/v1/chat/completions", json={"model": model, **CHAT}, timeout=60).status_code
        )
    )
    holder.start()
    try:
        _health_reaches(svc, "requests_in_flight", 1)
        yield results
    finally:
        os.kill(worker, signal.SIGCONT)
        holder.join()


@pytest.mark.timeout(90)
def test_busy_model_is_not_evicted_and_waiters_queue_fifo(start_service: StartService) -> None:
    svc = start_service(modelrouter_models_max=1, modelrouter_queue_timeout=1.5)
    with _busy(svc, "tiny-a") as results:
        started = time.monotonic()
        # timeout=30: a queue that ignored queue_timeout would hang here and fail.
        blocked = httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-b", **CHAT}, timeout=30)
        assert blocked.status_code == 503 and blocked.json()["type"] == "/problems/capacity"
        assert time.monotonic() - started > 1.4, "it waited in the queue for queue_timeout, not refused at once"
        assert events(svc, type="instance_stop_requested") == [], "a busy model must not be evicted"
        assert model_entry(svc, "tiny-a")["status"]["value"] == "loaded"
    assert results == [200]
    # Once idle, tiny-a gives its slot to tiny-b.
    answer = httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-b", **CHAT}, timeout=30)
    assert answer.status_code == 200
    assert [e["model"] for e in events(svc, type="instance_stop_requested")] == ["tiny-a"]


@pytest.mark.timeout(90)
def test_a_queued_client_that_hangs_up_leaves_the_queue(start_service: StartService) -> None:
    # A queue timeout far beyond the waits below: only the hang-up can empty the queue.
    svc = start_service(modelrouter_models_max=1, modelrouter_queue_timeout=600)
    with _busy(svc, "tiny-a"):
        body = json.dumps({"model": "tiny-b", **CHAT}).encode()
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        with socket.create_connection(("127.0.0.1", svc.port)) as client:
            client.sendall(head.encode() + body)
            _health_reaches(svc, "queued_requests", 1)
        _health_reaches(svc, "queued_requests", 0)
        assert events(svc, type="instance_stop_requested") == []


@pytest.mark.timeout(120)
def test_idle_ttl_unloads_with_reason_idle(start_service: StartService, tmp_path: Path) -> None:
    presets = _presets(tmp_path, "[tiny-a]\nttl = 1\n")
    svc = start_service(modelrouter_presets=presets)
    assert httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-a", **CHAT}, timeout=30).status_code == 200
    stop = wait_for_event(svc, "instance_stop_requested", timeout=30, model="tiny-a")
    assert stop["data"]["reason"] == "idle"
    wait_for_event(svc, "instance_stopped", timeout=30, model="tiny-a")
    assert model_entry(svc, "tiny-a")["status"]["value"] == "unloaded"


@pytest.mark.timeout(120)
def test_restart_on_failure_brings_a_crashed_model_back(start_service: StartService, tmp_path: Path) -> None:
    presets = _presets(tmp_path, "[tiny-a]\nrestart = on-failure\naliases = fast\n")
    svc = start_service(modelrouter_presets=presets)
    assert httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "fast", **CHAT}, timeout=30).status_code == 200
    assert model_entry(svc, "tiny-a")["aliases"] == ["fast"]
    pid = model_entry(svc, "tiny-a")["status"]["instance"]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for_event(svc, "instance_crashed", timeout=30, model="tiny-a")
    deadline = time.monotonic() + 60
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

    # tiny-a's GGUF names no pooling: as in llama-server, --embedding then pools "none", which OpenAI's
    # route refuses, so the preset asks for mean pooling (--pooling mean).
    presets = _presets(tmp_path, "[tiny-a]\nembedding = true\npooling = mean\n")
    svc = start_service(modelrouter_presets=presets)
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused")
    result = client.embeddings.create(model="tiny-a", input=["hello", "world"])
    assert len(result.data) == 2 and len(result.data[0].embedding) == 64
    assert result.data[0].embedding != result.data[1].embedding
    # Without embedding=true a model embeds all the same, from a second context pooled "mean"
    # (as Ollama's do; llama-server would answer 501: docs/llama-cpp-compat.md).
    other = client.embeddings.create(model="tiny-b", input=["hello"])
    assert len(other.data) == 1 and len(other.data[0].embedding) == 64


@pytest.mark.timeout(60)
def test_load_timeout_kills_a_worker_that_never_gets_ready(start_service: StartService, tmp_path: Path) -> None:
    # A FIFO with no writer: the worker's first read of the "model" blocks forever.
    fifo = tmp_path / "hangs.gguf"
    os.mkfifo(fifo)
    presets = _presets(tmp_path, f"[hangs]\nmodel = {fifo}\n")
    svc = start_service(modelrouter_presets=presets, modelrouter_load_timeout=2)
    started = time.monotonic()
    # timeout=30: a load timeout that never fired would hang here and fail.
    answer = httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "hangs", **CHAT}, timeout=30)
    assert answer.status_code == 503 and "load_timeout" in answer.json()["detail"]
    assert time.monotonic() - started > 1.5, "the load timeout (2 s) fired, not something sooner"
    failed = wait_for_event(svc, "instance_load_failed", model="hangs")
    assert failed["data"]["reason"] == "load_timeout" and failed["source"]["kind"] == "router"
    assert model_entry(svc, "hangs")["status"]["value"] == "failed"
    from tests.service_probes import inference_children, still_running

    assert still_running(inference_children(svc), 30) == []
