"""``GET /events/stream`` against the real service in a subprocess."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import ServerSentEvent, connect_sse

from devtools.service_process import ServiceProcess
from service.event_store.codec import new_event
from service.event_store.sync_store import SyncEventStore


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[ServiceProcess]:
    proc = ServiceProcess(tmp_path / "home", env={"MODELROUTER_SSE_KEEPALIVE": "0.3"})
    proc.start()
    yield proc
    proc.stop()


def _store(svc: ServiceProcess) -> SyncEventStore:
    return SyncEventStore(svc.home / "modelrouter.db", source={"kind": "test"})


def _append(store: SyncEventStore, n: int, model: str = "org/m:Q8_0") -> list[int]:
    return store.append(
        [
            new_event("download_progress", {"job_id": "j", "bytes_done": i, "bytes_total": n}, model=model)
            for i in range(n)
        ]
    )


def _read(
    svc: ServiceProcess, count: int, *, headers: dict[str, str] | None = None, params: str = ""
) -> list[ServerSentEvent]:
    got: list[ServerSentEvent] = []
    with (
        httpx.Client(timeout=10) as client,
        connect_sse(client, "GET", f"{svc.url}/events/stream{params}", headers=headers or {}) as source,
    ):
        for sse in source.iter_sse():
            if sse.event == "message" and not sse.data:
                continue  # a keep-alive comment
            got.append(sse)
            if len(got) == count:
                break
    return got


@pytest.mark.timeout(60)
def test_reconnect_with_last_event_id_delivers_exactly_the_missed_events(svc: ServiceProcess) -> None:
    store = _store(svc)
    _append(store, 3)
    first = _read(svc, 4, params="?after=0")
    started = ["router_started", "node_devices_measured", "recovery_completed"]
    assert [e.event for e in first] == [*started, "download_progress"]
    last_id = first[-1].id
    missed = _append(store, 4)
    resumed = _read(svc, 2 + 4, headers={"Last-Event-ID": last_id})
    assert [int(e.id) for e in resumed] == list(range(int(last_id) + 1, missed[-1] + 1))
    # The same with a filter: only the missed events that match.
    filtered = _read(svc, 4, headers={"Last-Event-ID": last_id}, params="?type=download_*&model=org/m:Q8_0")
    assert [int(e.id) for e in filtered] == [int(last_id) + 1, int(last_id) + 2, *missed][:4]
    payload = json.loads(resumed[0].data)
    assert payload["position"] == int(resumed[0].id) and payload["type"] == resumed[0].event
    store.close()


@pytest.mark.timeout(60)
def test_events_from_another_process_arrive_live_one_by_one(svc: ServiceProcess) -> None:
    """Each append from another process reaches a live stream before the next is made.
    How fast is a goal of bench/reaction.py, not a pass/fail here."""
    store = _store(svc)
    start = svc.wait_healthy()["position"]
    received: list[int] = []
    arrived = threading.Condition()
    ready = threading.Event()

    def listen() -> None:
        with (
            httpx.Client(timeout=30) as client,
            connect_sse(client, "GET", f"{svc.url}/events/stream?type=download_*") as source,
        ):
            ready.set()  # headers are in: the stream's start position is fixed, later appends are ours
            for sse in source.iter_sse():
                if sse.id:
                    with arrived:
                        received.append(int(sse.id))
                        arrived.notify_all()
                    if len(received) == 5:
                        return

    thread = threading.Thread(target=listen)
    thread.start()
    assert ready.wait(30)
    sent = []
    for _ in range(5):
        (position,) = _append(store, 1)
        sent.append(position)
        with arrived:
            assert arrived.wait_for(lambda p=position: p in received, timeout=30), f"{position} never arrived"
    thread.join(30)
    assert received == sent and min(received) > start
    store.close()


@pytest.mark.timeout(60)
def test_filters_apply_and_keepalives_flow(svc: ServiceProcess) -> None:
    store = _store(svc)
    store.append(
        [
            new_event("instance_requested", {"instance_id": "i", "port": 9000}, model="a"),
            new_event(
                "download_requested",
                {"job_id": "j", "repo": "org/b", "commit": "c" * 40, "files": [], "total_bytes": 10},
                model="b",
            ),
        ]
    )
    lines: list[str] = []
    with httpx.Client(timeout=30) as client, client.stream("GET", f"{svc.url}/events/stream?after=0&model=b") as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():  # keep-alives every 0.3 s; none at all would time the read out
            lines.append(line)
            if sum(1 for item in lines if item.startswith(":")) >= 2:
                break
    events = [line.split(": ", 1)[1] for line in lines if line.startswith("event:")]
    assert events == ["download_requested"]
    assert any(line.startswith(":") for line in lines), "keep-alive comments must flow when idle"
    store.close()


@pytest.mark.timeout(60)
def test_disconnected_clients_leak_nothing(svc: ServiceProcess) -> None:
    for _ in range(5):
        with httpx.Client(timeout=10) as client, client.stream("GET", f"{svc.url}/events/stream?after=0") as answer:
            next(answer.iter_lines())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if svc.wait_healthy()["open_streams"] == 0:
            break
        time.sleep(0.1)
    assert svc.wait_healthy()["open_streams"] == 0


def test_bad_last_event_id_is_400(svc: ServiceProcess) -> None:
    answer = httpx.get(f"{svc.url}/events/stream", headers={"Last-Event-ID": "abc"})
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("application/problem+json")


@pytest.mark.timeout(60)
def test_llama_cpp_models_sse_shape(svc: ServiceProcess) -> None:
    """llama.cpp clients read ``data: {model, event, data}`` lines from /models/sse."""
    store = _store(svc)
    got: list[dict[str, object]] = []
    ready = threading.Event()

    def listen() -> None:
        with httpx.Client(timeout=30) as client, connect_sse(client, "GET", f"{svc.url}/models/sse") as source:
            ready.set()
            for sse in source.iter_sse():
                if sse.data:
                    got.append(json.loads(sse.data))
                    if len(got) == 5:
                        return

    thread = threading.Thread(target=listen)
    thread.start()
    assert ready.wait(30)  # headers are in: the stream's start position is fixed, later appends are ours
    store.append(
        [
            new_event(
                "download_requested",
                {"job_id": "j", "repo": "org/m", "commit": "c" * 40, "files": [], "total_bytes": 10},
                model="org/m:Q8_0",
            ),
            new_event("download_progress", {"job_id": "j", "bytes_done": 5, "bytes_total": 10}, model="org/m:Q8_0"),
            new_event(  # no llama.cpp twin
                "request_completed",
                {"instance_id": "i", "route": "/v1/completions", "status_code": 200, "duration_ms": 1.0},
                model="org/m:Q8_0",
            ),
            new_event("download_cancelled", {"job_id": "j", "bytes_on_disk": 5}, model="org/m:Q8_0"),
            new_event(
                "instance_crashed", {"instance_id": "i", "exit_code": 139, "stderr_tail": ""}, model="org/m:Q8_0"
            ),
            new_event("models_reloaded", {"added": ["x"], "changed": [], "removed": [], "unloaded": []}),
        ]
    )
    thread.join(30)
    assert got == [
        {"model": "org/m:Q8_0", "event": "model_status", "data": {"status": "downloading"}},
        {"model": "org/m:Q8_0", "event": "download_progress", "data": {"progress": {"j": {"done": 5, "total": 10}}}},
        {"model": "org/m:Q8_0", "event": "download_cancelled", "data": {}},
        {"model": "org/m:Q8_0", "event": "status_change", "data": {"status": "unloaded", "exit_code": 139}},
        {"model": "*", "event": "models_reload"},
    ]
    store.close()
