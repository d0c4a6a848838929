"""Inference through the real service: real llama-cpp-python workers, real processes."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.e2e.conftest import StartService
from tests.eventually import eventually
from tests.service_probes import events, exited, inference_children, model_entry, still_running, wait_for_event

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def _chat(url: str, model: str, **extra: object) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": model, **CHAT, **extra}, timeout=60)


@pytest.mark.timeout(90)
def test_basic_cycle_load_chat_stream_unload(start_service: StartService) -> None:
    svc = start_service()
    answer = httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=10)
    assert answer.status_code == 200 and answer.json()["success"] is True
    ready = wait_for_event(svc, "instance_ready", model="tiny-a")
    assert ready["data"]["architecture"] == "llama" and ready["data"]["load_ms"] > 0
    # /events reads the log, /models the fold the tail keeps: it may be a moment behind
    eventually(lambda: model_entry(svc, "tiny-a")["status"]["value"] == "loaded", "tiny-a loaded in /models")

    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused")
    reply = client.chat.completions.create(model="tiny-a", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert (
        reply.choices[0].message.role == "assistant" and reply.usage is not None and reply.usage.completion_tokens > 0
    )
    chunks = list(
        client.chat.completions.create(
            model="tiny-a", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
        )
    )
    assert len(chunks) >= 2 and chunks[-1].choices[0].finish_reason is not None
    completion = client.completions.create(model="tiny-a", prompt="once upon", max_tokens=3)
    assert completion.choices[0].text is not None

    pid = ready["data"]["pid"]
    assert httpx.post(f"{svc.url}/models/unload", json={"model": "tiny-a"}, timeout=30).status_code == 200
    assert exited(pid)
    lifecycle = [e for e in events(svc, model="tiny-a", type="instance_*") if e["type"] != "instance_stats"]
    types = [e["type"] for e in lifecycle]
    assert types == [
        "instance_requested",
        "instance_loading",
        "instance_ready",
        "instance_stop_requested",
        "instance_stopped",
    ]
    assert model_entry(svc, "tiny-a")["status"]["value"] == "unloaded"
    served = events(svc, model="tiny-a", type="request_completed")
    assert len(served) == 3 and {e["data"]["route"] for e in served} == {"/v1/chat/completions", "/v1/completions"}
    assert {e["data"]["instance_id"] for e in served} == {ready["data"]["instance_id"]}


@pytest.mark.timeout(120)
def test_autoload_and_lru_eviction_with_one_slot(start_service: StartService) -> None:
    svc = start_service(modelrouter_models_max=1)
    peak = {"workers": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak["workers"] = max(peak["workers"], len(inference_children(svc)))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        order = ["tiny-a", "tiny-b", "tiny-a", "tiny-b", "tiny-a"]
        for model in order:
            answer = _chat(svc.url, model)
            assert answer.status_code == 200, answer.text
            assert answer.json()["model"] == model
    finally:
        stop.set()
        sampler.join()
    assert peak["workers"] <= 1
    # From the log: instances alive at once never exceed the limit.
    live, worst = 0, 0
    for event in events(svc, type="instance_*"):
        if event["type"] == "instance_requested":
            live += 1
        elif event["type"] in {"instance_stopped", "instance_crashed", "instance_lost", "instance_load_failed"}:
            live -= 1
        worst = max(worst, live)
    assert worst == 1
    stops = events(svc, type="instance_stop_requested")
    assert [e["data"]["reason"] for e in stops] == ["evicted"] * (len(order) - 1)
    assert [e["model"] for e in stops] == order[:-1]
    assert [e["data"]["reason"] for e in events(svc, type="instance_requested")] == ["autoload"] * len(order)


@pytest.mark.timeout(90)
def test_eight_concurrent_requests_all_succeed(start_service: StartService) -> None:
    svc = start_service()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: _chat(svc.url, "tiny-a", stream=bool(i % 2)), range(8)))
    assert [a.status_code for a in answers] == [200] * 8
    assert len(events(svc, type="instance_requested")) == 1, "one load shared by all waiters"
    deadline = time.monotonic() + 30  # appended off the response path: wait for them
    while len(events(svc, type="request_completed", model="tiny-a")) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(events(svc, type="request_completed", model="tiny-a")) == 8


@pytest.mark.timeout(90)
def test_crash_is_recorded_and_next_request_autoloads(start_service: StartService) -> None:
    # How fast a crash is noticed is a goal of bench/reaction.py, not a pass/fail here.
    svc = start_service()
    assert _chat(svc.url, "tiny-a").status_code == 200
    pid = model_entry(svc, "tiny-a")["status"]["instance"]["pid"]
    os.kill(pid, signal.SIGKILL)
    crashed = wait_for_event(svc, "instance_crashed", timeout=30)
    assert crashed["data"]["signal"] == signal.SIGKILL
    entry = eventually(lambda: (e := model_entry(svc, "tiny-a"))["status"]["value"] == "failed" and e, "failed")
    assert entry["status"]["error"]["reason"] == "crashed"
    assert _chat(svc.url, "tiny-a").status_code == 200
    assert model_entry(svc, "tiny-a")["status"]["value"] == "loaded"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("model", "reason"), [("broken-truncated", "truncated"), ("broken-random", "not_gguf"), ("broken-text", "not_gguf")]
)
def test_bad_model_files_fail_clearly(start_service: StartService, model: str, reason: str) -> None:
    svc = start_service()
    answer = _chat(svc.url, model)
    assert answer.status_code == 503
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert reason in answer.json()["detail"]
    failed = wait_for_event(svc, "instance_load_failed", model=model)
    assert failed["data"]["reason"] == reason and failed["data"]["message"]
    assert model_entry(svc, model)["status"]["value"] == "failed"
    assert httpx.get(f"{svc.url}/health", timeout=5).status_code == 200
    eventually(lambda: inference_children(svc) == [], "the failed worker exited")  # it records, then exits
    # A failed load is not retried by every request: the same answer, no new worker.
    assert _chat(svc.url, model).status_code == 503
    assert len(events(svc, type="instance_requested", model=model)) == 1


@pytest.mark.timeout(60)
def test_request_errors_are_problems(start_service: StartService) -> None:
    svc = start_service()
    missing = httpx.post(f"{svc.url}/v1/chat/completions", json=CHAT, timeout=10)
    assert missing.status_code == 400 and "model" in missing.json()["detail"]
    unknown = _chat(svc.url, "no-such-model")
    assert unknown.status_code == 404
    not_json = httpx.post(f"{svc.url}/v1/chat/completions", content=b"{nope", timeout=10)
    assert not_json.status_code == 400
    no_autoload = httpx.post(
        f"{svc.url}/v1/chat/completions?autoload=false", json={"model": "tiny-a", **CHAT}, timeout=10
    )
    assert (
        no_autoload.status_code == 400 and no_autoload.json()["type"] == "/problems/model_not_loaded"
    )  # llama.cpp answers 400
    for answer in (missing, unknown, not_json, no_autoload):
        assert answer.headers["content-type"].startswith("application/problem+json")
    assert httpx.post(f"{svc.url}/models/unload", json={"model": "tiny-a"}, timeout=10).status_code == 409
    assert httpx.post(f"{svc.url}/models/load", json={"model": "nope"}, timeout=10).status_code == 404


@pytest.mark.timeout(60)
def test_no_orphans_after_service_kill9(start_service: StartService) -> None:
    svc = start_service(modelrouter_models_max=2)
    assert _chat(svc.url, "tiny-a").status_code == 200
    assert _chat(svc.url, "tiny-b").status_code == 200
    workers = inference_children(svc)
    assert len(workers) == 2
    svc.kill9()
    alive = still_running(workers, 30)
    assert alive == [], f"orphaned workers: {[p.pid for p in alive]}"


@pytest.mark.timeout(60)
def test_stuck_worker_is_killed_after_stop_timeout(start_service: StartService) -> None:
    svc = start_service(modelrouter_stop_timeout=1)
    assert _chat(svc.url, "tiny-a").status_code == 200
    pid = model_entry(svc, "tiny-a")["status"]["instance"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    # timeout=30: a stop that never escalated to SIGKILL would hang here and fail.
    assert httpx.post(f"{svc.url}/models/unload", json={"model": "tiny-a"}, timeout=30).status_code == 200
    assert time.monotonic() - started > 0.9, "SIGKILL only after stop_timeout (1 s)"
    stopped = wait_for_event(svc, "instance_stopped", model="tiny-a")
    assert stopped["data"]["forced"] is True and stopped["data"]["reason"] == "unload"
    assert exited(pid)


@pytest.mark.timeout(60)
def test_graceful_shutdown_stops_children_and_records_it(start_service: StartService) -> None:
    svc = start_service()
    assert _chat(svc.url, "tiny-a").status_code == 200
    workers = inference_children(svc)
    # uvicorn re-raises the signal after a clean shutdown, so the status is "killed by SIGTERM".
    assert svc.stop() in (0, -signal.SIGTERM)
    assert still_running(workers, 30) == []
    from service.event_store.sync_store import SyncEventStore

    store = SyncEventStore(svc.home / "modelrouter.db", source={"kind": "test"})
    everything = [r for r in store.read() if r.type != "instance_stats"]  # load reports may interleave
    # The worker saves its prompt cache (issue 35) between the stop request and its stop.
    types = [r.type for r in everything]
    saved = [i for i, t in enumerate(types) if t == "prompt_cache_saved"]
    assert saved and types.index("instance_stop_requested") < saved[0] and saved[-1] < types.index("instance_stopped")
    recorded = [r for r in everything if not r.type.startswith("prompt_cache_")]
    assert [r.type for r in recorded][-3:] == ["instance_stop_requested", "instance_stopped", "router_stopped"]
    assert recorded[-2].event.reason == "shutdown"  # type: ignore[attr-defined]
