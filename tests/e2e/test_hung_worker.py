"""A worker that hangs without dying (issue 29 §1), through the real service and real workers: a SIGSTOPped
worker is given up within its hang timeout, every request it held gets a 503 in its API's shape, the event
says what was seen, and the next request is served by a new worker. A long single prefill step is not a hang
as long as its worker answers its heartbeat; a step that outlasts the bound is."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from devtools.service_process import ServiceProcess, worker_headers
from devtools.tiny_gguf import write_tiny_gguf
from service.core.liveness import HEARTBEAT_S
from tests.e2e.conftest import StartService
from tests.eventually import eventually
from tests.service_probes import events, inference_children, model_entry, ps_output, still_running, wait_for_event

BOUND = 4.0  # the hang timeout of these tests, in seconds
LONG = {"model": "tiny-a", "prompt": "once upon a time", "max_tokens": 3000, "temperature": 0}


def _ready_pid(svc: ServiceProcess, model: str, after: int = 0) -> int:
    ready = eventually(
        lambda: events(svc, type="instance_ready", model=model, after=after), f"{model} ready", timeout=60
    )
    return int(ready[-1]["data"]["pid"])


class _Timed:
    """A request run on its own thread: its answer (status, body text) and when it came."""

    def __init__(self, call: Callable[[], tuple[int, str]]) -> None:
        self.answer: tuple[int, str] | None = None
        self.at = 0.0
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], tuple[int, str]]) -> None:
        try:
            self.answer = call()
        except httpx.HTTPError as exc:
            self.answer = (0, repr(exc))
        self.at = time.monotonic()

    def result(self, timeout: float) -> tuple[int, str]:
        self._thread.join(timeout)
        assert self.answer is not None, f"no answer within {timeout:g} s"
        return self.answer


def _post(svc: ServiceProcess, path: str, body: dict[str, Any]) -> Callable[[], tuple[int, str]]:
    def call() -> tuple[int, str]:
        answer = httpx.post(svc.url + path, json=body, timeout=120)
        return answer.status_code, answer.text

    return call


@pytest.mark.timeout(180)
def test_a_stopped_worker_is_given_up_its_requests_answered_503_and_the_next_one_served(
    start_service: StartService,
) -> None:
    svc = start_service(modelrouter_hang_timeout=BOUND, modelrouter_stop_timeout=8)
    httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=30).raise_for_status()
    pid = _ready_pid(svc, "tiny-a")
    hung = psutil.Process(pid)
    stream_lines: list[str] = []
    stopped_at = 0.0
    with httpx.stream("POST", f"{svc.url}/v1/completions", json={**LONG, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        waiting: list[_Timed] = []
        for line in r.iter_lines():
            if line.startswith("data: "):
                stream_lines.append(line)
            if len(stream_lines) == 1 and not stopped_at:
                os.kill(pid, signal.SIGSTOP)  # hangs without dying: mid-stream
                stopped_at = time.monotonic()
                chat = {"model": "tiny-a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
                waiting = [
                    _Timed(_post(svc, "/v1/chat/completions", chat)),
                    _Timed(_post(svc, "/v1/messages", {**chat, "max_tokens": 4})),
                    _Timed(_post(svc, "/api/generate", {"model": "tiny-a", "prompt": "hi", "stream": False})),
                ]
        stream_ended = time.monotonic()
    # The stream ends with an error event saying why, within the bound plus 5 s.
    assert stream_ended - stopped_at < BOUND + 5, stream_ended - stopped_at
    error = json.loads(stream_lines[-1].removeprefix("data: "))["error"]
    assert error["code"] == 503 and "stopped responding" in error["message"]
    # Every waiting request: a 503 in its own API's shape, in time.
    answers = [w.result(BOUND + 5) for w in waiting]
    for w in waiting:
        assert w.at - stopped_at < BOUND + 5, w.at - stopped_at
    (chat_status, chat_body), (msg_status, msg_body), (gen_status, gen_body) = answers
    assert chat_status == 503 and "stopped responding" in json.loads(chat_body)["error"]["message"]
    anthropic = json.loads(msg_body)["error"]
    assert msg_status == 503 and anthropic["type"] == "api_error" and "stopped responding" in anthropic["message"]
    assert gen_status == 503 and "stopped responding" in json.loads(gen_body)["error"]  # Ollama's {"error": "..."}

    # What was seen is recorded, and every view shows the state and its reason while it lasts.
    seen = wait_for_event(svc, "instance_unresponsive", model="tiny-a")["data"]
    assert seen["cause"] == "no_answer" and seen["bound_s"] == BOUND and seen["silent_s"] >= BOUND
    assert seen["requests_waiting"] >= 1 and seen["last_step_s"] >= seen["silent_s"] and seen["steps"] >= 0
    status = model_entry(svc, "tiny-a")["status"]
    assert status["value"] == "unresponsive" and status["error"]["reason"] == "unresponsive", status
    assert "tiny-a unresponsive: inference worker stopped responding" in ps_output(svc)
    # Killed after the stop grace; the end says why, the model is failed with the reason.
    ended = wait_for_event(svc, "instance_stopped", model="tiny-a", timeout=30)["data"]
    assert ended["reason"] == "unresponsive" and ended["forced"] is True
    assert still_running([hung], 10) == []
    status = model_entry(svc, "tiny-a")["status"]
    assert status["value"] == "failed" and "stopped responding" in status["error"]["message"]

    # The next request loads the model again: a new worker serves it.
    position = events(svc)[-1]["position"]
    answer = httpx.post(f"{svc.url}/v1/completions", json={**LONG, "max_tokens": 2}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert _ready_pid(svc, "tiny-a", after=position) != pid
    workers = inference_children(svc)
    svc.stop()
    assert still_running(workers, 15) == []  # nothing is left running


def _big_model(path: Path) -> Path:
    # ~67M f32 parameters on one thread: one 2000-token step of it lasts seconds (measured below, not assumed).
    return write_tiny_gguf(path, seed=7, n_layer=16, n_embd=512, n_head=8, n_ff=2048, n_ctx=4096)


def _completion(svc: ServiceProcess, model: str, prompt: str) -> httpx.Response:
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "cache_prompt": False}
    return httpx.post(f"{svc.url}/completion", json=body, timeout=300)


def _heartbeat(ready: dict[str, Any]) -> dict[str, Any]:
    """The worker's heartbeat, asked directly (with its secret, as the service asks it)."""
    headers = worker_headers(ready["pid"])
    return dict(httpx.get(ready["endpoint"] + "/engine/heartbeat", headers=headers, timeout=30).json())


@pytest.mark.timeout(300)
def test_a_long_prefill_step_answered_through_is_no_hang_and_one_past_the_bound_is(
    tmp_path: Path, start_service: StartService
) -> None:
    model = _big_model(tmp_path / "big.gguf")
    preset = tmp_path / "presets.ini"
    common = f"model = {model}\nctx-size = 4096\nbatch-size = 2048\nubatch-size = 2048\nparallel = 1\nthreads = 1\n"
    preset.write_text(f"[big]\n{common}hang-timeout = 120\n\n[big-stuck]\n{common}hang-timeout = 1.5\n")
    svc = start_service(modelrouter_presets=preset)
    httpx.post(f"{svc.url}/models/load", json={"model": "big"}, timeout=30).raise_for_status()
    ready = wait_for_event(svc, "instance_ready", model="big", timeout=120)["data"]

    # Measure one step of the longest prompt one step takes (a byte-level vocabulary: one token a character;
    # -b 2048): the step under test is the same one, so it lasts as long give or take the machine's mood.
    tokens = 2000
    assert _completion(svc, "big", "x" * tokens).status_code == 200
    if _heartbeat(ready)["slowest_s"] < 4 * HEARTBEAT_S:
        pytest.skip("this machine prefills too fast for a step of several heartbeats")

    beats: list[dict[str, Any]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            beats.append({**_heartbeat(ready), "at": time.monotonic()})
            time.sleep(HEARTBEAT_S / 2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    answer = _completion(svc, "big", "y" * tokens)
    done.set()
    watcher.join(30)
    assert answer.status_code == 200, answer.text
    # The worker answered its heartbeat all through the step: the step count stood still while step_s grew.
    during = [b for b in beats if b["step_s"] is not None and b["step_s"] >= HEARTBEAT_S]
    assert len(during) >= 2 and len({b["steps"] for b in during}) == 1, beats
    assert events(svc, type="instance_unresponsive") == []

    # The same step under a bound shorter than it: a stuck step, though the HTTP thread still answers.
    stuck = _completion(svc, "big-stuck", "z" * tokens)
    assert stuck.status_code == 503 and "stopped responding" in stuck.json()["error"]["message"], stuck.text
    seen = wait_for_event(svc, "instance_unresponsive", model="big-stuck")["data"]
    assert seen["cause"] == "step_stuck" and seen["silent_s"] < seen["bound_s"] == 1.5


@pytest.mark.timeout(120)
def test_llama_server_s_timeout_cuts_a_stalled_client_body_and_a_silent_worker(start_service: StartService) -> None:
    """``-to``/``--timeout`` (here through llama-server's LLAMA_ARG_TIMEOUT) on both hops: a client that stops
    sending its body gets a 408, and a worker that stops answering (hang timeout off) a 503 past it."""
    svc = start_service(llama_arg_timeout=2, modelrouter_hang_timeout=0)
    host, port = svc.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as client:
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        client.sendall((head + "Content-Length: 100\r\n\r\n{").encode())  # 1 byte of 100, then nothing
        started = time.monotonic()
        received = b""
        while chunk := client.recv(65536):  # the answer, then the close
            received += chunk
        answer = received.decode(errors="replace")
    assert answer.startswith("HTTP/1.1 408"), answer[:300]
    assert "request_timeout" in answer and 2 <= time.monotonic() - started < 12

    httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=30).raise_for_status()
    pid = _ready_pid(svc, "tiny-a")
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        answer = httpx.post(f"{svc.url}/v1/completions", json={**LONG, "max_tokens": 2}, timeout=60)
        waited = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    assert answer.status_code == 503 and "ReadTimeout" in answer.json()["detail"], answer.text
    assert 2 <= waited < 12, waited
    assert events(svc, type="instance_unresponsive") == []  # hang-timeout 0: never given up
