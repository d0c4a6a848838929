"""``DELETE /models`` racing autoloads (issue 11 §1.2), through the real service.

Before the fix, folding ``model_removed`` dropped an instance whose worker was
still starting; the next autoload recorded ``instance_requested`` and then
failed ``assert model.path is not None`` (a 500), leaving a phantom instance
that held a slot, and unloading it recorded ``instance_stopped`` twice.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import httpx
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.conftest_hub import unique_repo
from tests.service_probes import events, inference_children

ROUNDS = 12
_ENDS = {"instance_stopped", "instance_crashed", "instance_lost", "instance_load_failed"}


@pytest.mark.timeout(240)
def test_delete_racing_autoload_leaves_no_phantom_and_no_5xx(hub: HubServer, tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf, seed=3)
    repo = unique_repo("race")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": gguf.read_bytes()})
    model = f"{repo}:Q4_K_M"
    svc = ServiceProcess(tmp_path / "home", env={"HF_ENDPOINT": hub.url, "MODELROUTER_MODELS_MAX": "1"})
    svc.start()
    statuses: list[tuple[str, int, str]] = []
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, len(inference_children(svc)))
            time.sleep(0.005)

    def chat(client: httpx.Client) -> None:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        try:
            answer = client.post("/v1/chat/completions", json=body)
            statuses.append(("chat", answer.status_code, answer.text[:200]))
        except httpx.HTTPError:
            pass

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rng = random.Random(7)
    try:
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            for _ in range(ROUNDS):
                pulled = client.post("/models", json={"model": repo})
                assert pulled.status_code == 200, pulled.text
                deadline = time.monotonic() + 60
                while client.get("/models").json()["data"] and not any(
                    m["id"] == model and m["status"]["value"] == "unloaded"
                    for m in client.get("/models").json()["data"]
                ):
                    assert time.monotonic() < deadline, (
                        f"download did not finish: {pulled.json()} {client.get('/models').json()['data']} "
                        f"{client.get('/downloads').json()['downloads'][-2:]}"
                    )
                    time.sleep(0.02)
                chatters = [threading.Thread(target=chat, args=(client,)) for _ in range(3)]
                for thread in chatters:
                    thread.start()
                time.sleep(rng.uniform(0, 0.3))  # the delete lands somewhere in the autoload
                removed = client.delete("/models", params={"model": model, "force": "true"})
                statuses.append(("delete", removed.status_code, removed.text[:200]))
                for thread in chatters:
                    thread.join()
    finally:
        stop.set()
        sampler.join()
    health = httpx.get(f"{svc.url}/health", timeout=10).json()
    log = events(svc, model=model)
    svc.stop()
    assert [s for s in statuses if s[1] >= 500] == []
    assert {code for kind, code, _ in statuses if kind == "delete"} <= {200, 404}
    assert health["anomalies"] == 0, health["last_anomaly"]
    assert peak <= 1
    ends: dict[str, int] = {}
    for event in log:
        if event["type"] in _ENDS:
            ends[event["data"]["instance_id"]] = ends.get(event["data"]["instance_id"], 0) + 1
    requested = {e["data"]["instance_id"] for e in log if e["type"] == "instance_requested"}
    assert requested, "no autoload happened: the race was not exercised"
    assert all(ends.get(i) == 1 for i in requested), {i: ends.get(i) for i in requested}
