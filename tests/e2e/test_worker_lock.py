"""Issue 34: a worker the service spawned answers only that service. Another local process that
connects to its port directly is refused, with no key or a wrong one; the service's own traffic
(every dialect, llama-server's routes, its probes) carries the worker's secret and is served."""

from __future__ import annotations

import httpx
import ollama
import openai
import pytest

from devtools.service_process import worker_headers
from service.core import worker_key
from tests.another_process import ask
from tests.e2e.conftest import StartService
from tests.eventually import eventually
from tests.service_probes import model_entry, wait_for_event

HI = [{"role": "user", "content": "hi"}]


@pytest.mark.timeout(120)
def test_another_process_is_refused_at_the_workers_port_and_the_service_is_served(
    start_service: StartService,
) -> None:
    svc = start_service()
    httpx.post(f"{svc.url}/models/load", json={"model": "tiny-a"}, timeout=30).raise_for_status()
    ready = wait_for_event(svc, "instance_ready", model="tiny-a", timeout=60)["data"]
    endpoint = ready["endpoint"]
    wrong = {worker_key.HEADER: "not-the-secret"}
    for headers in ({}, wrong):
        for path in ("/health", "/v1/models", "/slots", "/props"):
            refused = ask(endpoint + path, headers=headers)
            assert refused.status == 401 and refused.json()["error"]["type"] == "authentication_error", path
        chat = ask(endpoint + "/v1/chat/completions", method="POST", headers=headers, body={"messages": HI})
        assert chat.status == 401
    # The secret exists, in the worker's environment only (which only the service's user may read).
    assert ask(endpoint + "/health", headers=worker_headers(ready["pid"])).status == 200

    eventually(lambda: model_entry(svc, "tiny-a")["status"]["value"] == "loaded", "tiny-a loaded in /models")
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused")
    reply = client.chat.completions.create(model="tiny-a", messages=HI, max_tokens=3)
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    stream = client.chat.completions.create(model="tiny-a", messages=HI, max_tokens=3, stream=True)
    assert [c for c in stream if c.choices and c.choices[0].finish_reason is not None]
    said = ollama.Client(host=svc.url).chat(model="tiny-a", messages=HI, options={"num_predict": 3})
    assert said.message.role == "assistant" and said.done
    for route in ("/props", "/slots"):  # llama-server's own routes, proxied with ?model=
        answer = httpx.get(f"{svc.url}{route}", params={"model": "tiny-a"}, timeout=30)
        assert answer.status_code == 200, (route, answer.text)
    assert httpx.get(f"{svc.url}/props", params={"model": "tiny-a"}, timeout=30).json()["total_slots"] >= 1
