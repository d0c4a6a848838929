"""The worker's port answers only whoever holds its secret (issue 34; :mod:`service.core.worker_key`),
and a worker started by hand without one says loudly that it is open."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from service.core import worker_key
from tests.another_process import ask
from tests.workers.conftest import WorkerProc

SECRET = "worker-lock-test-secret-0123456789abcdefghij"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_a_locked_worker_refuses_other_processes_on_every_route_and_serves_its_key(
    spawn_worker: Callable[..., WorkerProc], tiny_gguf: Path
) -> None:
    worker = spawn_worker(tiny_gguf, env={worker_key.ENV: SECRET})
    endpoint = worker.wait_ready()
    wrong = {worker_key.HEADER: SECRET[:-1] + "x"}
    for path in ("/health", "/v1/models", "/slots", "/metrics", "/props", "/engine/heartbeat"):
        for headers in ({}, wrong):
            refused = ask(endpoint + path, headers=headers)
            error = refused.json()["error"]
            assert (refused.status, error["code"], error["type"]) == (401, 401, "authentication_error"), path
            assert worker_key.HEADER in error["message"] and SECRET not in refused.text
    chat = ask(endpoint + "/v1/chat/completions", method="POST", body=CHAT)
    assert chat.status == 401  # refused before its body was read
    assert ask(endpoint + "/health", headers={worker_key.HEADER: SECRET}).status == 200
    with httpx.Client(base_url=endpoint, headers={worker_key.HEADER: SECRET}, timeout=60) as client:
        answer = client.post("/v1/chat/completions", json=CHAT)  # the same connection, kept alive
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["role"] == "assistant"
        assert client.get("/health").json() == {"status": "ok"}
    assert SECRET not in worker.stderr_tail(100_000)


def test_a_worker_started_without_a_secret_is_open_and_says_so(
    spawn_worker: Callable[..., WorkerProc], tiny_gguf: Path
) -> None:
    worker = spawn_worker(tiny_gguf)
    endpoint = worker.wait_ready()
    assert ask(endpoint + "/health").status == 200
    assert "worker_open" in worker.stderr_tail(100_000) and worker_key.ENV in worker.stderr_tail(100_000)
