"""Vertex AI's ``POST /predict`` (llama-server's ``AIP_MODE=PREDICTION``), on a real worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.workers.conftest import WorkerProc
from workers.inference._cli import predict_route
from workers.inference.http.dialects._predict import gcp_format


def test_route_names_and_the_environment() -> None:
    assert gcp_format("/v1/chat/completions") == "chatCompletions" and gcp_format("/apply-template") == "applyTemplate"
    assert predict_route({}) is None and predict_route({"AIP_MODE": "TRAINING"}) is None
    assert predict_route({"AIP_MODE": "PREDICTION"}) == "/predict"
    assert (
        predict_route({"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "v1/endpoints/x:predict"})
        == "/endpoints/x:predict"
    )


@pytest.mark.timeout(120)
def test_predict_runs_each_instance_as_its_route(spawn_worker: Any, tiny_gguf: Path) -> None:
    url = spawn_worker(tiny_gguf, "-np", "2", env={"AIP_MODE": "PREDICTION"}).wait_ready()
    chat = {"@requestFormat": "chatCompletions", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    body = {
        "instances": [
            chat,
            {"@requestFormat": "/v1/completions", "prompt": "once", "max_tokens": 3, "stream": True},
            {"@requestFormat": "tokenize", "content": "hello"},
            {"@requestFormat": "noSuchThing"},
            {"max_tokens": 2},
            "not an object",
        ]
    }
    answer = httpx.post(url + "/predict", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    first, second, tokens, unknown, unnamed, bad = answer.json()["predictions"]
    assert first["object"] == "chat.completion" and first["choices"][0]["message"]["role"] == "assistant"
    assert second["object"] == "text_completion", "streaming is turned off in predictions"
    assert tokens["tokens"] and all(isinstance(t, int) for t in tokens["tokens"])
    assert "no handler registered for @requestFormat: noSuchThing" in unknown["error"]["message"]
    assert "@requestFormat" in unnamed["error"]["message"] and "JSON object" in bad["error"]["message"]
    many = httpx.post(url + "/predict", json={"instances": [{}] * 129}, timeout=30)
    assert many.status_code == 400 and "maximum size of 128" in many.json()["error"]["message"]
    assert httpx.post(url + "/predict", json={"x": 1}, timeout=30).status_code == 400


@pytest.mark.timeout(60)
def test_predict_needs_the_prediction_mode(ready_worker: WorkerProc) -> None:
    assert httpx.post(ready_worker.endpoint + "/predict", json={"instances": []}, timeout=30).status_code == 404
