"""llama.cpp router's scheduling rules (issue 8 §7), one test each, through the real
service with ``LLAMA_SERVER_DEBUG_FAKE_TIMING`` as llama.cpp's own tests use it:
every proxied request holds its model busy 2 s, every load waits 2 s first.

Where llama.cpp's tests sleep to order things, these wait for what the
service reports (``requests_in_flight``, ``queued_requests`` on ``/health``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core.server_mode import FAKE_TIMING_WARNING
from tests.conftest_hub import unique_repo
from tests.eventually import eventually
from tests.service_probes import events, model_entry

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def three_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("three")
    for seed, name in enumerate(("tiny-a", "tiny-b", "tiny-c"), start=1):
        write_tiny_gguf(root / f"{name}.gguf", seed=seed)
    return root


@pytest.fixture
def router(tmp_path: Path, three_models: Path, hub: HubServer) -> Iterator[Callable[[int], ServiceProcess]]:
    started: list[ServiceProcess] = []

    def start(models_max: int) -> ServiceProcess:
        env = {
            "MODELROUTER_MODELS_DIR": str(three_models),
            "MODELROUTER_MODELS_MAX": str(models_max),
            "LLAMA_SERVER_DEBUG_FAKE_TIMING": "1",
            "HF_ENDPOINT": hub.url,
        }
        svc = ServiceProcess(tmp_path / f"home{len(started)}", env=env)
        started.append(svc)
        return svc.start()

    yield start
    for svc in started:
        svc.stop()


class Call:
    """One request in a thread; ``status`` once it returned."""

    def __init__(self, svc: ServiceProcess, model: str, timeout: float = 120) -> None:
        self.status: int | None = None
        self.error: Exception | None = None
        self.body = ""
        self._thread = threading.Thread(target=self._run, args=(svc, model, timeout), daemon=True)
        self._thread.start()

    def _run(self, svc: ServiceProcess, model: str, timeout: float) -> None:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        try:
            answer = httpx.post(f"{svc.url}/v1/chat/completions", json=body, timeout=timeout)
            self.status, self.body = answer.status_code, answer.text
        except httpx.HTTPError as exc:
            self.error = exc

    def ok(self) -> None:
        self._thread.join(180)
        assert not self._thread.is_alive(), "request did not finish"
        assert self.status == 200, (self.status, self.error, self.body[:300])


def _health(svc: ServiceProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{svc.url}/health", timeout=10).json())


def _until(what: str, predicate: Callable[[], bool], timeout: float = 120) -> None:
    eventually(predicate, what, timeout=timeout, interval=0.02)


def _load(svc: ServiceProcess, model: str) -> None:
    assert httpx.post(f"{svc.url}/models/load", json={"model": model}, timeout=30).status_code == 200
    _until(f"{model} loaded", lambda: model_entry(svc, model)["status"]["value"] == "loaded")


def _status(svc: ServiceProcess, model: str) -> str:
    return str(model_entry(svc, model)["status"]["value"])


def _evictions(svc: ServiceProcess, model: str) -> int:
    return sum(1 for e in events(svc, model=model, type="instance_stop_requested") if e["data"]["reason"] == "evicted")


def test_a_model_serving_a_request_is_never_evicted(router: Callable[[int], ServiceProcess]) -> None:
    svc = router(1)
    _load(svc, "tiny-a")
    busy = Call(svc, "tiny-a")
    _until("tiny-a busy", lambda: _health(svc)["requests_in_flight"] == 1)
    queued = Call(svc, "tiny-b")  # no free slot, tiny-a busy: it waits
    busy.ok()
    queued.ok()
    assert _status(svc, "tiny-b") == "loaded" and _status(svc, "tiny-a") == "unloaded"
    # request_completed is appended beside the answer, not before it: wait for it
    _until("tiny-a's request recorded", lambda: bool(events(svc, model="tiny-a", type="request_completed")))
    served = events(svc, model="tiny-a", type="request_completed")[-1]["position"]
    evicted = events(svc, model="tiny-a", type="instance_stop_requested")[-1]["position"]
    assert evicted > served, "tiny-a was evicted while it served its request"


def test_waiters_for_one_missing_model_share_one_eviction(router: Callable[[int], ServiceProcess]) -> None:
    svc = router(2)
    _load(svc, "tiny-a")
    _load(svc, "tiny-b")
    busy = Call(svc, "tiny-a")  # only tiny-b can be given up
    _until("tiny-a busy", lambda: _health(svc)["requests_in_flight"] == 1)
    waiters = [Call(svc, "tiny-c") for _ in range(3)]
    busy.ok()
    for waiter in waiters:
        waiter.ok()
    assert _status(svc, "tiny-c") == "loaded"
    assert _status(svc, "tiny-a") == "loaded", "a leftover demand took tiny-a's slot too"
    assert _status(svc, "tiny-b") == "unloaded"
    assert _evictions(svc, "tiny-b") == 1 and _evictions(svc, "tiny-a") == 0


def test_a_client_that_leaves_the_queue_costs_no_model_its_slot(router: Callable[[int], ServiceProcess]) -> None:
    svc = router(1)
    _load(svc, "tiny-a")
    busy = Call(svc, "tiny-a")
    _until("tiny-a busy", lambda: _health(svc)["requests_in_flight"] == 1)
    impatient = Call(svc, "tiny-b", timeout=0.5)  # gives up while queued
    _until("the impatient client to give up", lambda: impatient.error is not None or impatient.status is not None)
    _until("the queue to empty", lambda: _health(svc)["queued_requests"] == 0)
    busy.ok()
    again = Call(svc, "tiny-a")  # served by the same instance: nobody took its slot
    again.ok()
    assert _evictions(svc, "tiny-a") == 0
    assert events(svc, model="tiny-b", type="instance_requested") == []
    served_by = {e["data"]["instance_id"] for e in events(svc, model="tiny-a", type="request_completed")}
    assert len(served_by) == 1


def test_the_queue_is_served_in_arrival_order(router: Callable[[int], ServiceProcess]) -> None:
    svc = router(1)
    _load(svc, "tiny-a")
    busy = Call(svc, "tiny-a")
    _until("tiny-a busy", lambda: _health(svc)["requests_in_flight"] == 1)
    first = Call(svc, "tiny-b")
    _until("the first to queue", lambda: _health(svc)["queued_requests"] == 1)
    second = Call(svc, "tiny-c")
    _until("the second to queue", lambda: _health(svc)["queued_requests"] == 2)
    busy.ok()
    first.ok()
    second.ok()
    # request_completed is appended beside the answer, not before it: wait for both
    _until(
        "both requests recorded",
        lambda: all(events(svc, model=m, type="request_completed") for m in ("tiny-b", "tiny-c")),
    )
    done_b = events(svc, model="tiny-b", type="request_completed")[0]["position"]
    done_c = events(svc, model="tiny-c", type="request_completed")[0]["position"]
    assert done_b < done_c, "the queue was not served in arrival order"


def test_two_requests_for_two_missing_models_are_both_served(router: Callable[[int], ServiceProcess]) -> None:
    svc = router(1)
    _load(svc, "tiny-a")
    first, second = Call(svc, "tiny-b"), Call(svc, "tiny-c")  # both want idle tiny-a's slot
    first.ok()
    second.ok()
    assert _status(svc, "tiny-a") == "unloaded"


def test_a_download_never_takes_a_model_slot(router: Callable[[int], ServiceProcess], hub: HubServer) -> None:
    svc = router(1)
    _load(svc, "tiny-a")
    repo = unique_repo("slot")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 256 * 1024})
    assert httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30).status_code == 200
    _until("the download", lambda: bool(events(svc, type="download_finished")))
    assert _status(svc, "tiny-a") == "loaded" and _evictions(svc, "tiny-a") == 0


def test_fake_timing_delays_loads_and_holds_requests(router: Callable[[int], ServiceProcess]) -> None:
    """Lower bounds only: a slow machine can make them longer, never shorter. ``/health`` says the
    switch is on (in single-model mode it is not: ``test_single_model_parity``)."""
    svc = router(1)
    assert FAKE_TIMING_WARNING in httpx.get(f"{svc.url}/health", timeout=30).json()["warnings"]
    Call(svc, "tiny-a").ok()
    requested = events(svc, model="tiny-a", type="instance_requested")[0]["recorded_at"]
    loading = events(svc, model="tiny-a", type="instance_loading")[0]["recorded_at"]
    gap = _seconds(loading) - _seconds(requested)
    assert gap >= 2.0, f"the load was not delayed: {gap:.2f} s"
    _until("the request recorded", lambda: bool(events(svc, model="tiny-a", type="request_completed")))
    completed = events(svc, model="tiny-a", type="request_completed")[0]
    assert completed["data"]["duration_ms"] >= 2000


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
