"""The service keeps answering while it spawns workers under churn.

Regression for the freeze of issue 11 §1.1: a worker spawned with
``preexec_fn`` forks a child that runs Python's at-fork hooks (huggingface_hub's
``close_session``) and can block on a lock another thread held at fork time,
while the event loop sits inside ``Popen``. Eight threads pulling three repos
and one thread force-deleting them every 0.1 s froze the service within
9-75 s, five times out of five; SIGTERM was then ignored and the stuck child
kept the listening port.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from tests.conftest_hub import unique_repo

DURATION = float(os.environ.get("MODELROUTER_FREEZE_TEST_SECONDS", "60"))
# A freeze never ends, so a generous bound loses nothing: a loaded 2-core machine answers well within it.
HEALTH_TIMEOUT = 30.0
MIN_CHURN = {"pull": 10, "delete": 5}  # the churn really happened before we stop probing


@pytest.mark.timeout(int(DURATION) + 240)
def test_health_answers_throughout_concurrent_pulls_and_deletes(hub: HubServer, tmp_path: Path) -> None:
    repos = [unique_repo("churn") for _ in range(3)]
    for repo in repos:
        make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 64 * 1024})
    svc = ServiceProcess(tmp_path / "home", env={"HF_ENDPOINT": hub.url})
    svc.start()
    stop = threading.Event()
    server_errors: list[str] = []
    health_failures: list[str] = []
    counts = {"pull": 0, "delete": 0, "health": 0}
    lock = threading.Lock()

    def note(kind: str, response: httpx.Response) -> None:
        with lock:
            counts[kind] += 1
            if response.status_code >= 500:
                server_errors.append(f"{kind} {response.status_code} {response.text[:300]}")

    def puller(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):  # the health probe is the judge of a freeze
                    note("pull", client.post("/models", json={"model": rng.choice(repos)}))

    def deleter() -> None:
        rng = random.Random(99)
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            while not stop.is_set():
                model = f"{rng.choice(repos)}:Q4_K_M"
                with contextlib.suppress(httpx.HTTPError):
                    note("delete", client.delete("/models", params={"model": model, "force": "true"}))
                stop.wait(0.1)

    threads = [threading.Thread(target=puller, args=(i,), daemon=True) for i in range(8)]
    threads.append(threading.Thread(target=deleter, daemon=True))
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + DURATION
        with httpx.Client(base_url=svc.url, timeout=HEALTH_TIMEOUT) as probe:
            # At least DURATION seconds, and on until the churn reached its minimum (a slow machine takes longer).
            while time.monotonic() < deadline or any(counts[k] < n for k, n in MIN_CHURN.items()):
                assert time.monotonic() < deadline + 120, f"the churn never got going: {counts}"
                started = time.monotonic()
                try:
                    answer = probe.get("/health")
                    counts["health"] += 1
                    if answer.status_code != 200:
                        health_failures.append(f"status {answer.status_code}")
                except httpx.HTTPError as exc:
                    health_failures.append(f"{type(exc).__name__} after {time.monotonic() - started:.1f} s")
                    break  # frozen: no point probing on
                time.sleep(0.25)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=90)
    assert not health_failures, f"/health stopped answering: {health_failures}; counts {counts}"
    assert all(counts[k] >= n for k, n in MIN_CHURN.items()), counts  # the churn really happened
    assert not server_errors, server_errors[:5]
    # SIGTERM is honoured, and nothing the service spawned keeps its port.
    assert svc.proc is not None
    svc.proc.terminate()
    assert svc.proc.wait(timeout=60) is not None
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", svc.port))
