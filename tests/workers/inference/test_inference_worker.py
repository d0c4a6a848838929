"""The inference worker as the service sees it: a real subprocess with real llama.cpp."""

from __future__ import annotations

import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from devtools.tiny_gguf import (
    write_random_bytes,
    write_text_as_gguf,
    write_tiny_gguf,
    write_truncated_gguf,
    write_unsupported_arch_gguf,
)
from tests.eventually import eventually
from tests.service_probes import exited
from workers.runtime import read_jsonl

pytest.importorskip("llama_cpp")

# Fixtures from tests/workers/conftest.py: WorkerProc objects, typed loosely here.
WorkerProc = Any
Spawn = Callable[..., Any]


def _client(endpoint: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{endpoint}/v1", api_key="x", max_retries=0, timeout=30)


# -- startup and serving ------------------------------------------------------


@pytest.mark.timeout(60)
def test_events_loading_then_ready(ready_worker: WorkerProc) -> None:
    events = ready_worker.events()
    types = [t for t, _ in events]
    assert types[0] == "instance_loading"
    assert types.index("instance_ready") > 0
    assert all(d["instance_id"] == "shared" for _, d in events)
    loading = events[0][1]
    assert loading["pid"] == ready_worker.proc.pid
    assert loading["endpoint"].startswith("http://127.0.0.1:")
    assert loading["params"]["n_threads"] == 1 and loading["params"]["embedding"] is False
    ready = dict(events)["instance_ready"]
    assert ready["endpoint"] == loading["endpoint"]
    assert ready["n_ctx"] == 256  # --n-ctx 4096 capped to the model's training context
    assert ready["n_params"] > 100_000
    assert ready["architecture"] == "llama"
    assert ready["file_size"] > 0 and ready["load_ms"] > 0
    progress = [d["progress"] for t, d in events if t == "loading_progress"]
    assert progress and progress[-1] == 1.0


@pytest.mark.timeout(60)
def test_health_and_models(ready_worker: WorkerProc) -> None:
    r = httpx.get(f"{ready_worker.endpoint}/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    models = _client(ready_worker.endpoint).models.list()
    assert [m.id for m in models.data] == ["tiny"]


@pytest.mark.timeout(60)
def test_chat_completion_non_stream(ready_worker: WorkerProc) -> None:
    resp = _client(ready_worker.endpoint).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hello!"}], max_tokens=8
    )
    assert resp.model == "tiny"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].finish_reason in ("length", "stop")
    assert resp.usage is not None and resp.usage.completion_tokens >= 1


@pytest.mark.timeout(60)
def test_chat_completion_stream(ready_worker: WorkerProc) -> None:
    stream = _client(ready_worker.endpoint).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hello!"}], max_tokens=8, stream=True
    )
    chunks = list(stream)
    assert len(chunks) >= 3
    assert chunks[-1].choices[0].finish_reason in ("length", "stop")


@pytest.mark.timeout(60)
def test_raw_stream_is_sse_with_done(ready_worker: WorkerProc) -> None:
    body = {"prompt": "abc", "max_tokens": 5, "stream": True}
    with httpx.stream("POST", f"{ready_worker.endpoint}/v1/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e[len("data: ") :]) for e in events[:-1]]
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.timeout(60)
def test_completions(ready_worker: WorkerProc) -> None:
    client = _client(ready_worker.endpoint)
    resp = client.completions.create(model="tiny", prompt="Once upon", max_tokens=6, temperature=0)
    assert resp.object == "text_completion"
    assert resp.usage is not None and resp.usage.completion_tokens >= 1
    chunks = list(client.completions.create(model="tiny", prompt="x", max_tokens=4, stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"


@pytest.mark.timeout(60)
def test_bad_input_is_400_and_worker_survives(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    with httpx.Client(base_url=url) as c:
        bad_json = c.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert bad_json.status_code == 400 and "error" in bad_json.json()
        assert c.post("/v1/chat/completions", json={"model": "tiny"}).status_code == 400
        assert c.post("/v1/chat/completions", json={"messages": "hi"}).status_code == 400
        assert c.post("/v1/chat/completions", json={"messages": [{"role": "wizard"}]}).status_code == 400
        assert c.post("/v1/completions", json={"max_tokens": 3}).status_code == 400
        assert c.post("/v1/completions", json={"prompt": "x", "max_tokens": "many"}).status_code == 400
        assert c.post("/v1/completions", json=[1, 2]).status_code == 400
        r = c.post("/v1/embeddings", json={"input": []})  # a chat model embeds too (a second context)
        assert r.status_code == 400 and "empty" in r.json()["error"]["message"]
        assert c.post("/v1/nope", json={}).status_code == 404
        # A prompt longer than the 256-token context: 400, for plain and stream.
        long_prompt = "word " * 400
        assert c.post("/v1/completions", json={"prompt": long_prompt}).status_code == 400
        assert c.post("/v1/completions", json={"prompt": long_prompt, "stream": True}).status_code == 400
        assert c.get("/health").json() == {"status": "ok"}
    with pytest.raises(openai.BadRequestError):
        _client(url).chat.completions.create(model="tiny", messages=[])


@pytest.mark.timeout(90)
def test_eight_concurrent_requests_all_succeed(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    results: list[Any] = [None] * 12

    def one(i: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=60) as c:
                if i % 3 == 0:
                    with c.stream(
                        "POST",
                        "/v1/chat/completions",
                        json={
                            "messages": [{"role": "user", "content": f"req {i}"}],
                            "max_tokens": 16,
                            "stream": True,
                        },
                    ) as r:
                        lines = [ln for ln in r.iter_lines() if ln]
                        results[i] = (r.status_code, lines[-1])
                else:
                    r = c.post("/v1/completions", json={"prompt": f"req {i}", "max_tokens": 16})
                    results[i] = (r.status_code, r.json()["choices"][0]["finish_reason"])
        except Exception as exc:  # reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(isinstance(r, tuple) and r[0] == 200 for r in results), results
    assert {r[1] for i, r in enumerate(results) if i % 3 == 0} == {"data: [DONE]"}
    assert httpx.get(f"{url}/health").status_code == 200


@pytest.mark.timeout(60)
def test_client_disconnect_mid_stream_does_not_wedge(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    body = {"prompt": "a", "max_tokens": 200, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body) as r:
        next(r.iter_lines())  # read one line, then hang up
    r2 = httpx.post(f"{url}/v1/completions", json={"prompt": "b", "max_tokens": 3}, timeout=30)
    assert r2.status_code == 200


@pytest.mark.timeout(60)
def test_keep_alive_serves_many_requests_on_one_connection(ready_worker: WorkerProc) -> None:
    """The service's proxy pools connections to the worker. How fast a round trip on one
    is (no Nagle + delayed-ACK stall) is a goal of bench/proxy.py, not a pass/fail here."""
    address = urlsplit(ready_worker.endpoint)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        local_ports = set()
        for _ in range(50):
            conn.request("GET", "/health")
            assert conn.sock is not None
            local_ports.add(conn.sock.getsockname()[1])
            answer = conn.getresponse()
            assert answer.status == 200 and json.loads(answer.read()) == {"status": "ok"}
        assert len(local_ports) == 1, "the worker closed a keep-alive connection"
    finally:
        conn.close()


@pytest.mark.timeout(60)
def test_embeddings(spawn_worker: Spawn, tiny_embedding_gguf: Path) -> None:
    w = spawn_worker(tiny_embedding_gguf, "--embedding")
    client = _client(w.wait_ready())
    res = client.embeddings.create(model="tiny", input=["hello", "world"])  # base64 on the wire
    assert len(res.data) == 2 and len(res.data[0].embedding) == 64
    floats = client.embeddings.create(model="tiny", input="hi", encoding_format="float")
    assert len(floats.data[0].embedding) == 64
    assert w.events()[0][1]["params"]["embedding"] is True


@pytest.mark.timeout(60)
def test_legacy_engine_still_serves(spawn_worker: Spawn, tiny_gguf: Path) -> None:
    """``--engine legacy`` keeps llama_cpp.Llama (one request at a time) for comparison and fallback."""
    w = spawn_worker(tiny_gguf, "--engine", "legacy")
    client = _client(w.wait_ready())
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert chat.choices[0].finish_reason in ("length", "stop")
    assert (
        list(client.completions.create(model="tiny", prompt="x", max_tokens=3, stream=True))[-1]
        .choices[0]
        .finish_reason
        == "length"
    )
    assert httpx.get(f"{w.endpoint}/slots").status_code == 501
    # One request_finished line per finished request in the worker's log, as the batch engine writes.
    finished = eventually(lambda: (f := _finished_lines(w)) and len(f) == 2 and f, "two request_finished lines")
    assert finished[0]["cmpl_id"] == chat.id and finished[0]["stop"] == chat.choices[0].finish_reason
    assert chat.usage is not None and finished[0]["predicted_n"] == chat.usage.completion_tokens
    assert finished[0]["prompt_n"] == chat.usage.prompt_tokens and finished[0]["id_slot"] == 0
    assert finished[1]["cmpl_id"].startswith("cmpl-") and finished[1]["stop"] == "length"
    # A stream's numbers are counted as it samples: llama_cpp.Llama may sample past max_tokens to finish
    # a character, so at least 3.
    assert finished[1]["predicted_n"] >= 3 and finished[1]["prompt_n"] >= 1 and finished[1]["id_task"] == 2
    assert all(f["prompt_ms"] >= 0 and f["predicted_ms"] >= 0 and f["cache_n"] == 0 for f in finished)
    beat = httpx.get(f"{w.endpoint}/engine/heartbeat").json()  # the service's liveness check: one step a token
    assert beat["status"] == "ready" and beat["steps"] >= 7 and beat["step_s"] is None  # ended before its answer
    own = httpx.post(f"{w.endpoint}/v1/completions", json={"prompt": "x", "lora": [{"id": 0, "scale": 1}]}, timeout=30)
    assert own.status_code == 400 and "batch engine" in own.json()["error"]["message"]
    assert w.events()[0][1]["params"]["engine"] == "legacy"


def _finished_lines(w: WorkerProc) -> list[dict[str, Any]]:
    """The ``request_finished`` lines of the worker's log (JSON lines on its stderr)."""
    lines = [json.loads(ln) for ln in w.stderr_path.read_text().splitlines() if ln.startswith("{")]
    return [line for line in lines if line.get("event") == "request_finished"]


# -- load failures -------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (write_truncated_gguf, "truncated"),
        (write_random_bytes, "not_gguf"),
        (write_text_as_gguf, "not_gguf"),
        (None, "file_missing"),
        (write_unsupported_arch_gguf, "unsupported_architecture"),
    ],
)
def test_load_failure_is_classified(spawn_worker: Spawn, tmp_path: Path, make: Any, reason: str) -> None:
    path = tmp_path / "model.gguf"
    if make is not None:
        make(path)
    w = spawn_worker(path)
    failed = w.wait_event("instance_load_failed")
    assert failed["reason"] == reason, failed
    assert failed["message"]
    assert w.wait_exit(10) == 3
    assert "instance_ready" not in w.types()


@pytest.mark.timeout(60)
def test_kv_cache_allocation_failure_is_out_of_memory(tmp_path: Path, worker_tools: Any) -> None:
    # A 16M-token training context with --n-ctx 0 asks for an 8 GiB KV cache;
    # a 4 GiB address-space limit makes that fail fast and deterministically.
    model = write_tiny_gguf(tmp_path / "huge-ctx.gguf", n_ctx=2**24)
    events = tmp_path / "events.jsonl"
    cmd = worker_tools.command(model, instance_id="oom", events=events, extra=["--n-ctx", "0"])

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=worker_tools.root,
        env=worker_tools.env(),
        preexec_fn=limit_memory,
    )
    try:
        assert proc.wait(120) == 3  # generous: a loaded CI machine is slow, a hang is still caught
    finally:
        if proc.poll() is None:
            proc.kill()
        assert proc.stdin is not None
        proc.stdin.close()
    failed = dict(read_jsonl(events))["instance_load_failed"]
    assert failed["reason"] == "out_of_memory", failed
    assert "kv cache" in failed["message"]


# -- lifecycle -----------------------------------------------------------------


@pytest.mark.timeout(60)
def test_sigterm_stops_gracefully(spawn_worker: Spawn, tiny_gguf: Path) -> None:
    w = spawn_worker(tiny_gguf)
    w.wait_ready()
    w.proc.send_signal(signal.SIGTERM)
    assert w.wait_exit(10) == 0
    stopped = w.wait_event("instance_stopped", 1)
    # The JSON line holds what the store records: the whole payload, `forced` included.
    assert stopped == {"instance_id": w.instance_id, "reason": "signal", "exit_code": 0, "forced": False}


@pytest.mark.timeout(60)
def test_loading_state_then_sigterm_during_load(spawn_worker: Spawn, tmp_path: Path) -> None:
    # A FIFO as the model file blocks the load on open(): a load that never ends.
    fifo = tmp_path / "slow.gguf"
    os.mkfifo(fifo)
    w = spawn_worker(fifo)
    endpoint = w.wait_event("instance_loading")["endpoint"]
    health = httpx.get(f"{endpoint}/health")
    assert health.status_code == 503 and health.json() == {"status": "loading"}
    r = httpx.post(f"{endpoint}/v1/completions", json={"prompt": "x"})
    assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable_error"
    w.proc.send_signal(signal.SIGTERM)
    assert w.wait_exit(30) == 0
    assert w.types() == ["instance_loading", "instance_stopped"]
    assert w.wait_event("instance_stopped", 1)["reason"] == "signal"


@pytest.mark.timeout(60)
def test_stop_line_on_stdin_gives_reason(spawn_worker: Spawn, tiny_gguf: Path) -> None:
    w = spawn_worker(tiny_gguf)
    w.wait_ready()
    assert w.proc.stdin is not None
    w.proc.stdin.write(b"stop idle_ttl\n")
    w.proc.stdin.flush()
    assert w.wait_exit(10) == 0
    assert w.wait_event("instance_stopped", 1)["reason"] == "idle_ttl"


@pytest.mark.timeout(60)
def test_sigterm_lets_running_stream_finish(spawn_worker: Spawn, tiny_gguf: Path) -> None:
    w = spawn_worker(tiny_gguf)
    url = w.wait_ready()
    body = {"prompt": "a", "max_tokens": 200, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        next(lines)
        w.proc.send_signal(signal.SIGTERM)
        rest = [ln for ln in lines if ln]
    assert rest[-1] == "data: [DONE]"
    assert w.wait_exit(10) == 0


@pytest.mark.timeout(60)
def test_closing_stdin_makes_the_worker_exit(spawn_worker: Spawn, tiny_gguf: Path) -> None:
    w = spawn_worker(tiny_gguf)
    w.wait_ready()
    assert w.proc.stdin is not None
    w.proc.stdin.close()
    assert w.wait_exit(30) == 4  # how fast: bench/reaction.py
    # The service is gone: its recovery records instance_lost, the worker records nothing.
    assert "instance_stopped" not in w.types()


_PARENT = """
import subprocess, sys, time
cmd = sys.argv[1:]
child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(60)
def test_sigkill_of_parent_kills_the_worker(tmp_path: Path, tiny_gguf: Path, worker_tools: Any) -> None:
    events = tmp_path / "events.jsonl"
    cmd = worker_tools.command(tiny_gguf, instance_id="orphan", events=events)
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, *cmd], stdout=subprocess.PIPE, cwd=worker_tools.root, env=worker_tools.env()
    )
    worker_pid = 0
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        w = worker_tools.WorkerProc(parent, events, tmp_path / "none.log", "orphan")  # parent stands in for proc
        w.wait_event("instance_ready")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 30  # how fast: bench/reaction.py
        while not exited(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert exited(worker_pid), "worker outlived its parent"
        assert "instance_stopped" not in w.types()
    finally:
        if parent.poll() is None:
            parent.kill()
        if worker_pid and not exited(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)


@pytest.mark.timeout(60)
def test_events_go_to_the_sqlite_store_with_db(spawn_worker: Spawn, tiny_gguf: Path, db_path: Path) -> None:
    from service.event_store.sync_store import SyncEventStore

    w = spawn_worker(tiny_gguf, "--db", str(db_path), instance_id="dbinst")
    store = SyncEventStore(db_path, source={"kind": "test"})
    try:
        deadline = time.monotonic() + 20
        while "instance_ready" not in [r.type for r in store.read()] and time.monotonic() < deadline:
            assert w.proc.poll() is None, w.stderr_tail()
            time.sleep(0.02)
        w.proc.send_signal(signal.SIGTERM)
        assert w.wait_exit(10) == 0
        records = store.read()
    finally:
        store.close()
    types = [r.type for r in records]
    assert types[0] == "instance_loading" and types[-1] == "instance_stopped"
    assert "instance_ready" in types
    assert {r.model for r in records} == {"tiny"}
    assert all(r.source["kind"] == "inference_worker" and r.source["pid"] == w.proc.pid for r in records)
    ready = next(r for r in records if r.type == "instance_ready").event.to_data()
    assert ready["instance_id"] == "dbinst" and ready["architecture"] == "llama"


def test_a_port_taken_since_the_service_picked_it_falls_back_to_a_free_one(
    spawn_worker: Callable[..., Any], tiny_gguf: Path
) -> None:
    """The service picks a port that was free a moment ago; another process may take it
    first. The worker then serves on another port and says which in its events."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        w = spawn_worker(tiny_gguf, "--port", str(port))
        endpoint = w.wait_ready()
        assert endpoint.startswith("http://127.0.0.1:") and not endpoint.endswith(f":{port}")
        assert httpx.get(f"{endpoint}/health", timeout=30).status_code == 200
        loading = w.wait_event("instance_loading", 10)
        assert loading["endpoint"] == endpoint
