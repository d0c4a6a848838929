"""Embeddings and rerank through ``modelrouter serve`` started as llama-server would be.

A preset names a BERT embedding model (``embeddings = true``), a reranker
(``reranking = true``) and the tiny chat model; the openai library and plain
HTTP go through the router, whose schemas accept every form llama-server does
(objects, strings mixed with token ids, ``logit_bias`` pairs) and pass them on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_bert, write_tiny_gguf, write_tiny_lora


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("embedding-routes")
    bert = write_tiny_bert(root / "files" / "bert.gguf")
    rank = write_tiny_bert(root / "files" / "rank.gguf", pooling="rank")
    chat = write_tiny_gguf(root / "files" / "chat.gguf")
    lora = write_tiny_lora(root / "files" / "lora.gguf")
    preset = root / "models.ini"
    preset.write_text(
        f"[bert]\nmodel = {bert}\nembeddings = true\npooling = mean\n\n"
        f"[rank]\nmodel = {rank}\nreranking = true\n\n"
        f"[chat]\nmodel = {chat}\nlora = {lora}\nlora-init-without-apply = true\n"
    )
    # AIP_MODE reaches the workers (they inherit the service's environment): /predict is served.
    env = {"AIP_MODE": "PREDICTION"}
    with ServiceProcess(root / "home", env=env, args=["--models-preset", str(preset), "-np", "2"]) as proc:
        yield proc


def _post(svc: ServiceProcess, path: str, status: int = 200, **body: Any) -> Any:
    answer = httpx.post(f"{svc.url}{path}", json=body, timeout=90)
    assert answer.status_code == status, answer.text
    return answer.json()


@pytest.mark.timeout(180)
def test_openai_embeddings_through_the_router(svc: ServiceProcess) -> None:
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused")
    result = client.embeddings.create(model="bert", input=["a cat", "a dog"])
    assert [d.index for d in result.data] == [0, 1] and len(result.data[0].embedding) == 64
    assert abs(math.sqrt(sum(x * x for x in result.data[0].embedding)) - 1) < 1e-3
    assert result.usage.prompt_tokens == result.usage.total_tokens > 4
    mixed = _post(svc, "/v1/embeddings", model="bert", input=["s1", [2, 12, 3], {"prompt_string": "s2"}])
    assert len(mixed["data"]) == 3
    native = _post(svc, "/embedding", model="bert", content="hello", embd_normalize=-1)
    assert isinstance(native, list) and len(native[0]["embedding"][0]) == 64
    # The chat model embeds too (a second context in its worker).
    assert len(client.embeddings.create(model="chat", input="hello").data[0].embedding) == 64


@pytest.mark.timeout(180)
def test_rerank_through_the_router(svc: ServiceProcess) -> None:
    body = _post(svc, "/v1/rerank", model="rank", query="a cat", documents=["hello", "a cat sat", "zzz"], top_n=2)
    assert len(body["results"]) == 2 and body["results"][0]["relevance_score"] >= body["results"][1]["relevance_score"]
    tei = _post(svc, "/rerank", model="rank", query="a cat", texts=["hello", "a cat sat"], return_text=True)
    assert {r["text"] for r in tei} == {"hello", "a cat sat"}
    refused = _post(svc, "/rerank", 501, model="bert", query="q", documents=["d"])["error"]
    assert refused["type"] == "not_supported_error"
    # The router's schema refuses what llama-server would refuse, before any worker.
    assert _post(svc, "/rerank", 400, model="rank", documents=["d"])["status"] == 400


@pytest.mark.timeout(180)
def test_wide_completion_bodies_pass_the_router(svc: ServiceProcess) -> None:
    """A prompt object, strings mixed with ids, ``logit_bias`` pairs with ``false``, ``ignore_eos``."""
    base = {"model": "chat", "n_predict": 3, "temperature": 0}
    forced = _post(svc, "/completion", **base, prompt={"prompt_string": "once"}, logit_bias=[[71, 100], ["B", False]])
    assert forced["content"] == "AAA"
    assert _post(svc, "/completion", **base, prompt=[1, "once"], ignore_eos=True)["tokens_evaluated"] >= 2
    assert _post(svc, "/completion", 400, **base, prompt={"prompt_string": 5})["status"] == 400


@pytest.mark.timeout(180)
def test_lora_adapters_through_the_router(svc: ServiceProcess) -> None:
    """The preset's ``lora`` loads at scale 0 (``lora-init-without-apply``); ``POST
    /lora-adapters?model=`` with llama-server's array changes the model's greedy text."""
    adapters = httpx.get(f"{svc.url}/lora-adapters", params={"model": "chat"}, timeout=90)
    assert adapters.status_code == 200 and [a["scale"] for a in adapters.json()] == [0.0]
    body = {"model": "chat", "prompt": "hello there", "n_predict": 8, "temperature": 0}
    base = _post(svc, "/completion", **body)["content"]
    scales = httpx.post(f"{svc.url}/lora-adapters?model=chat", json=[{"id": 0, "scale": 1}], timeout=90)
    assert scales.status_code == 200 and scales.json() == {"success": True}
    assert _post(svc, "/completion", **body)["content"] != base
    assert httpx.post(f"{svc.url}/lora-adapters?model=chat", json=[], timeout=90).json() == {"success": True}
    assert _post(svc, "/completion", **body)["content"] == base
    # The router checks the array before any worker: a scale must be a number, the model named.
    bad = httpx.post(f"{svc.url}/lora-adapters?model=chat", json=[{"id": 0, "scale": "x"}], timeout=30)
    assert bad.status_code == 400
    assert httpx.post(f"{svc.url}/lora-adapters", json=[], timeout=30).status_code == 400


@pytest.mark.timeout(180)
def test_vertex_predictions_through_the_router(svc: ServiceProcess) -> None:
    """``POST /predict`` goes to the worker of its instances' ``model``, which runs each instance."""
    instances = [
        {"@requestFormat": "embeddings", "model": "bert", "input": "a cat"},
        {"@requestFormat": "/v1/embeddings", "model": "bert", "input": ["a", "b"]},
    ]
    predictions = _post(svc, "/predict", instances=instances)["predictions"]
    assert len(predictions[0]["data"]) == 1 and len(predictions[1]["data"]) == 2
    mixed = _post(svc, "/predict", 400, instances=[*instances, {"@requestFormat": "tokenize", "model": "chat"}])
    assert "one request, one model" in mixed["detail"]
    assert _post(svc, "/predict", 400, instances=[{"model": "bert"}])["status"] == 400


@pytest.mark.timeout(60)
def test_vertex_predictions_refused_or_empty_as_llama_server(svc: ServiceProcess) -> None:
    """Issue 29 §5: no instances is llama-server's empty answer (it was a 500); a body without an array
    of instances, or with more than 128, is llama-server's 400 in its words (``server-http.cpp``)."""
    assert _post(svc, "/predict", instances=[]) == {"predictions": []}
    for body in ({"instances": "x"}, {"instances": {"model": "bert"}}, {}):
        answer = httpx.post(f"{svc.url}/predict", json=body, timeout=30)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == {
            "code": 400,
            "type": "invalid_request_error",
            "message": "request body must include an array field named instances",
        }
    many = _post(svc, "/predict", 400, instances=[{"@requestFormat": "embeddings", "model": "bert"}] * 129)
    assert many["error"]["message"] == "instances array exceeds maximum size of 128"
