"""Embeddings and rerank on the batch engine, with llama-server's flags, shapes and errors.

Real workers on tiny generated GGUFs: a BERT encoder (mean pooling, and per
token with ``--pooling none``), a reranker (rank pooling, ``--reranking``) and
the tiny llama (a chat model: embeddings from a second context). One worker
per kind, shared by the module's tests.
"""

from __future__ import annotations

import base64
import math
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from devtools.tiny_gguf import write_tiny_bert
from tests.workers.conftest import REPO_ROOT, WorkerProc, worker_command, worker_env

EPSILON = 1e-3


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., str]]:
    """Start a worker on a model with llama-server's flags; its endpoint (all stopped at module end)."""
    started: list[WorkerProc] = []

    def run(model: Path, *flags: str) -> str:
        tmp = tmp_path_factory.mktemp("embed-worker")
        events, stderr_path = tmp / "events.jsonl", tmp / "stderr.log"
        with stderr_path.open("wb") as err:
            cmd = worker_command(model, instance_id=f"e{len(started)}", events=events, extra=list(flags))
            proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO_ROOT, env=worker_env()
            )
        w = WorkerProc(proc, events, stderr_path, f"e{len(started)}")
        started.append(w)
        return w.wait_ready()

    yield run
    for w in started:
        w.kill()
        if w.proc.stdin:
            w.proc.stdin.close()


@pytest.fixture(scope="module")
def bert(start: Callable[..., str], tmp_path_factory: pytest.TempPathFactory) -> str:
    return start(write_tiny_bert(tmp_path_factory.mktemp("bert") / "bert.gguf"), "--embedding", "-np", "4")


@pytest.fixture(scope="module")
def reranker(start: Callable[..., str], tmp_path_factory: pytest.TempPathFactory) -> str:
    return start(write_tiny_bert(tmp_path_factory.mktemp("rank") / "rank.gguf", pooling="rank"), "--reranking")


def _post(url: str, path: str, status: int = 200, **body: Any) -> Any:
    r = httpx.post(url + path, json=body, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def _norm(vec: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vec))


@pytest.mark.timeout(120)
def test_openai_embeddings_are_normalised_and_counted(bert: str) -> None:
    """``/v1/embeddings``: one unit vector per input (llama-server's default ``embd_normalize`` 2),
    ``usage`` counts every token evaluated ([CLS] and [SEP] included), through the openai library."""
    tokens = _post(bert, "/tokenize", content="hello world", add_special=True)["tokens"]
    body = _post(bert, "/v1/embeddings", input="hello world")
    assert body["object"] == "list" and body["data"][0]["object"] == "embedding" and body["data"][0]["index"] == 0
    assert len(body["data"][0]["embedding"]) == 64 and abs(_norm(body["data"][0]["embedding"]) - 1) < EPSILON
    assert body["usage"] == {"prompt_tokens": len(tokens), "total_tokens": len(tokens)}
    client = openai.OpenAI(base_url=f"{bert}/v1", api_key="unused")
    result = client.embeddings.create(model="tiny", input=["a cat", "a dog", "zebra", "hello world"])
    assert [d.index for d in result.data] == [0, 1, 2, 3]
    assert result.data[0].embedding != result.data[1].embedding
    assert all(
        abs(x - y) < EPSILON for x, y in zip(result.data[3].embedding, body["data"][0]["embedding"], strict=True)
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("inputs", "n"),
    [
        ("", 1),
        ([12, 34, 56], 1),
        ([12, 34, "string", 56, 78], 1),
        (["string1", [12, 34, 56]], 2),
        ([[12, 34, 56], [12, "string", 34, 56]], 2),
        ({"prompt_string": "string"}, 1),
        (["s1", {"prompt_string": "s2"}, {"content": [{"type": "text", "text": "s3"}]}], 3),
    ],
)
def test_every_input_shape_llama_server_takes(bert: str, inputs: Any, n: int) -> None:
    """Strings, token ids, mixes, ``prompt_string`` and content-part objects, one or several."""
    data = _post(bert, "/v1/embeddings", input=inputs)["data"]
    assert len(data) == n and all(len(d["embedding"]) == 64 for d in data)


@pytest.mark.timeout(120)
def test_content_parts_embed_like_the_string_and_batches_agree(bert: str) -> None:
    """Text parts are the joined string; five copies in one batch give the same vector."""
    parts = {"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]}
    data = _post(bert, "/v1/embeddings", input=["hello world", parts])["data"]
    assert max(abs(x - y) for x, y in zip(data[0]["embedding"], data[1]["embedding"], strict=True)) < EPSILON
    same = _post(bert, "/v1/embeddings", input=["the same words"] * 5)["data"]
    for d in same[1:]:
        assert max(abs(x - y) for x, y in zip(d["embedding"], same[0]["embedding"], strict=True)) < EPSILON


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "inputs",
    [
        [],
        {"content": "string"},
        {"content": [{"type": "unknown"}]},
        {"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"prompt_string": "x", "multimodal_data": ["AAAA"]},
        [True],
    ],
)
def test_bad_inputs_are_400(bert: str, inputs: Any) -> None:
    error = _post(bert, "/v1/embeddings", 400, input=inputs)["error"]
    assert error["code"] == 400 and error["message"]


@pytest.mark.timeout(120)
def test_native_shape_normalisation_and_base64(bert: str) -> None:
    """``/embedding`` answers llama-server's own list; ``embd_normalize`` -1 leaves the vector raw,
    0 scales to int16; base64 is the same float32 vector."""
    native = _post(bert, "/embedding", content="hello")
    assert isinstance(native, list) and native[0]["index"] == 0 and len(native[0]["embedding"]) == 1
    unit = native[0]["embedding"][0]
    raw = _post(bert, "/embeddings", input="hello", embd_normalize=-1)[0]["embedding"][0]
    assert abs(_norm(unit) - 1) < EPSILON and abs(_norm(raw) - 1) > 0.01
    assert all(abs(r / _norm(raw) - u) < EPSILON for r, u in zip(raw, unit, strict=True))
    int16 = _post(bert, "/embedding", content="hello", embd_normalize=0)[0]["embedding"][0]
    assert abs(max(abs(x) for x in int16) - 32760) < 1
    b64 = _post(bert, "/v1/embeddings", input="hello", encoding_format="base64")["data"][0]
    floats = struct.unpack("<64f", base64.b64decode(b64["embedding"]))
    assert b64["encoding_format"] == "base64" and max(abs(x - y) for x, y in zip(floats, unit, strict=True)) < EPSILON


@pytest.mark.timeout(120)
def test_too_long_input_is_a_clear_400(bert: str) -> None:
    error = _post(bert, "/v1/embeddings", 400, input="a " * 600)["error"]
    assert "too large" in error["message"]
    assert _post(bert, "/v1/embeddings", input="still serving")["data"]


@pytest.mark.timeout(120)
def test_pooling_none_gives_a_vector_per_token(start: Callable[..., str], tmp_path: Path) -> None:
    """``--pooling none``: ``/embedding`` gives one raw vector per token; OpenAI's route refuses."""
    url = start(write_tiny_bert(tmp_path / "bert.gguf"), "--embedding", "--pooling", "none")
    n = len(_post(url, "/tokenize", content="abc", add_special=True)["tokens"])
    vectors = _post(url, "/embedding", content="abc")[0]["embedding"]
    assert len(vectors) == n == 5  # [CLS] a b c [SEP]
    assert all(abs(_norm(v) - 1) > EPSILON for v in vectors)
    assert "not OAI compatible" in _post(url, "/v1/embeddings", 400, input="abc")["error"]["message"]


@pytest.mark.timeout(120)
def test_rerank_in_jina_and_tei_shapes(reranker: str) -> None:
    """Scores sorted best first, ``top_n`` cut, usage; TEI's ``texts`` gives a bare list with ``text``."""
    docs = ["a cat sat", "hello", "zzz", "what is a cat"]
    for path in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking"):
        body = _post(reranker, path, query="a cat", documents=docs)
        assert body["object"] == "list" and sorted(r["index"] for r in body["results"]) == [0, 1, 2, 3]
        scores = [r["relevance_score"] for r in body["results"]]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 4 * 3
    top = _post(reranker, "/rerank", query="a cat", documents=docs, top_n=2)["results"]
    assert top == body["results"][:2]
    tei = _post(reranker, "/rerank", query="a cat", texts=docs, return_text=True)
    assert [(r["index"], r["text"]) for r in tei] == [(r["index"], docs[r["index"]]) for r in body["results"]]
    assert [r["score"] for r in tei] == scores


@pytest.mark.timeout(120)
def test_rerank_errors(reranker: str, bert: str) -> None:
    assert "query" in _post(reranker, "/rerank", 400, documents=["x"])["error"]["message"]
    assert "documents" in _post(reranker, "/rerank", 400, query="q", documents=[])["error"]["message"]
    refused = _post(bert, "/rerank", 501, query="q", documents=["x"])["error"]
    assert refused["type"] == "not_supported_error" and "--reranking" in refused["message"]


@pytest.mark.timeout(120)
def test_a_chat_model_serves_embeddings_from_a_second_context(ready_worker: WorkerProc) -> None:
    """Without ``--embedding`` (as Ollama): mean-pooled unit vectors, and chat still works after."""
    url = ready_worker.endpoint
    data = _post(url, "/v1/embeddings", input=["hello", "world"])["data"]
    assert len(data) == 2 and all(abs(_norm(d["embedding"]) - 1) < EPSILON for d in data)
    assert data[0]["embedding"] != data[1]["embedding"]
    again = _post(url, "/v1/embeddings", input="hello")["data"][0]["embedding"]
    assert max(abs(x - y) for x, y in zip(again, data[0]["embedding"], strict=True)) < EPSILON
    done = _post(url, "/v1/completions", prompt="hi", max_tokens=3, temperature=0)
    assert done["choices"][0]["finish_reason"] in ("length", "stop")
