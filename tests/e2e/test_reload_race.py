"""``POST /models/reload`` and ``GET /models?reload=1`` racing downloads and removals.

The chaos test once saw a reload answer 500: re-reading the caches while a
download published its files or a removal deleted them. A model's files may
come and go during a reading; the reading sees each repo either whole or not
at all, and never fails.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.conftest_hub import unique_repo

ROUNDS = 15


@pytest.mark.timeout(300)
def test_reloads_racing_pulls_and_deletes_never_fail(hub: HubServer, tmp_path: Path) -> None:
    repos = []
    for i in range(2):
        gguf = tmp_path / f"m{i}.gguf"
        write_tiny_gguf(gguf, seed=20 + i)
        repo = unique_repo(f"reload{i}")
        make_repo(hub.root, repo, {"m-Q4_K_M.gguf": gguf.read_bytes(), "README.md": b"# tiny\n" * 50})
        repos.append(repo)
    hub.set_faults({"kind": "throttle", "rate": 2_000_000})  # downloads overlap the reloads
    svc = ServiceProcess(tmp_path / "home", env={"HF_ENDPOINT": hub.url}).start()
    bad: list[str] = []
    reloads = 0
    stop = threading.Event()

    def reload() -> None:
        nonlocal reloads
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            while not stop.is_set():
                answer = client.post("/models/reload") if reloads % 2 else client.get("/models?reload=1")
                reloads += 1
                if answer.status_code != 200:
                    bad.append(f"reload {answer.status_code}: {answer.text[:300]}")

    threads = [threading.Thread(target=reload, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            for n in range(ROUNDS):
                for repo in repos:
                    pulled = client.post("/models", json={"model": repo})
                    assert pulled.status_code == 200, pulled.text
                for repo in repos:
                    job = client.post("/models", json={"model": repo}).json()
                    if n % 3 == 2 and job.get("job_id"):  # a cancel with discard races the scan too
                        client.delete(f"/downloads/{job['job_id']}", params={"discard": "true"})
                for repo in repos:
                    removed = client.delete("/models", params={"model": f"{repo}:Q4_K_M", "force": "true"})
                    assert removed.status_code in (200, 404, 409), removed.text
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        svc.stop()
    assert reloads > ROUNDS
    assert bad == [], bad[:5]
    log = svc.log_path.read_text()
    assert "Traceback" not in log, log[log.find("Traceback") - 2000 : log.find("Traceback") + 3000]
