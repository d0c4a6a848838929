"""A worker killed by a signal while it serves a request, through the real service: the request, GET /models
and ``modelrouter ps`` each say what happened in words (the signal, what it usually means, a hint)."""

from __future__ import annotations

import json
import os
import signal
import threading

import httpx
import pytest

from devtools.service_process import ServiceProcess
from tests.e2e.conftest import StartService
from tests.eventually import eventually
from tests.service_probes import model_entry, ps_output, wait_for_event

# Long enough that the worker cannot finish it before the signal lands, even when the client reads its first
# chunk late on busy cores: 3000 tokens, no end of generation, in a context that holds them (-c 4096).
# Endless (a full context shifts, the EOS is ignored): only the signal ends it, however fast the machine.
LONG = {"model": "tiny-a", "prompt": "once upon a time", "max_tokens": 10**9, "temperature": 0, "ignore_eos": True}
LONG_CONTEXT = {"LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_CONTEXT_SHIFT": "1"}


def _worker_pid(svc: ServiceProcess) -> int:
    httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=30).raise_for_status()
    return int(wait_for_event(svc, "instance_ready", model="tiny-a")["data"]["pid"])


def _wait_processing(svc: ServiceProcess) -> None:
    """Until the worker's engine holds a request (its own /slots, routed by the service)."""

    def processing() -> bool:
        slots = httpx.get(f"{svc.url}/slots", params={"model": "tiny-a"}, timeout=10)
        return slots.status_code == 200 and any(s.get("is_processing") for s in slots.json())

    eventually(processing, "the request to reach the engine")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("sig", "meaning"),
    [
        (signal.SIGSEGV, "built for another CPU"),
        (signal.SIGILL, "instruction this CPU cannot run"),
        (signal.SIGKILL, "out-of-memory killer"),
    ],
)
def test_a_stream_cut_by_a_signal_ends_with_the_reason_and_every_view_shows_it(
    start_service: StartService, sig: signal.Signals, meaning: str
) -> None:
    svc = start_service(**LONG_CONTEXT)
    pid = _worker_pid(svc)
    data: list[dict[str, object]] = []
    with httpx.stream("POST", f"{svc.url}/v1/completions", json={**LONG, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data.append(json.loads(line.removeprefix("data: ")))
            if len(data) == 1:
                os.kill(pid, sig)  # while it serves its first request
    error = data[-1].get("error")
    assert isinstance(error, dict), data[-3:]
    name = sig.name
    assert f"killed by {name} on its first request" in str(error["message"]) and meaning in str(error["message"])
    assert data[-1]["signal"] == name and data[-1]["exit_code"] == 128 + sig and data[-1]["hint"]

    status = model_entry(svc, "tiny-a")["status"]
    assert status["value"] == "failed" and status["failed"] is True and status["exit_code"] == 128 + sig
    reason = status["error"]
    assert reason["signal_name"] == name and reason["first_request"] is True and reason["hint"]
    assert meaning in reason["message"] and reason["stderr_tail"]  # the worker's last words, kept
    if sig == signal.SIGKILL:
        assert "it held up to" in reason["message"]  # its peak memory, from wait4

    out = ps_output(svc)
    assert f"tiny-a failed: inference worker killed by {name} on its first request" in out
    assert "hint: " in out


@pytest.mark.timeout(120)
def test_a_plain_request_cut_by_sigsegv_gets_a_problem_naming_it(start_service: StartService) -> None:
    svc = start_service(**LONG_CONTEXT)
    pid = _worker_pid(svc)
    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{svc.url}/v1/completions", json=LONG, timeout=60))
    )
    request.start()
    _wait_processing(svc)
    os.kill(pid, signal.SIGSEGV)
    request.join(60)
    (answer,) = answers
    assert answer.status_code == 503 and answer.headers["content-type"].startswith("application/problem+json")
    body = answer.json()
    assert "killed by SIGSEGV on its first request" in body["detail"] and body["signal"] == "SIGSEGV"
    assert body["exit_code"] == 139 and "rebuild llama-cpp-python" in body["hint"]
    assert body["error"]["message"] == body["detail"]  # llama.cpp clients read the same words
