"""Reranking and llama-server's unprefixed ``/embeddings`` through the router, with the flags on
``modelrouter serve``'s command line (not a preset key), every request naming its model:

* ``--models-dir D --reranking``: a rank-pooling BERT answers llama-server's four rerank routes;
* ``--models-dir D --embedding``: a BERT answers ``/embeddings`` in llama-server's native shape.

The shapes are those of the single-model tests (``test_single_model_parity.py``) and of llama.cpp's
``tools/server`` (``format_response_rerank``, ``format_embeddings_response``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_bert

DOCS = ["a cat sat", "hello", "zzz", "what is a cat"]
pytestmark = pytest.mark.timeout(180)


def _post(svc: ServiceProcess, path: str, status: int = 200, **body: Any) -> Any:
    answer = httpx.post(f"{svc.url}{path}", json=body, timeout=120)
    assert answer.status_code == status, (path, answer.text)
    return answer.json()


def test_reranking_flag_serves_the_four_rerank_routes(tmp_path: Path) -> None:
    """Each route answers Jina's shape (``model``, ``object``, ``usage``, ``results`` best first) and
    the same ranking; ``top_n`` cuts it; TEI's ``texts`` gives the bare list; no ``model`` is a 400."""
    write_tiny_bert(tmp_path / "models" / "rank.gguf", pooling="rank")
    with ServiceProcess(tmp_path / "home", args=["--models-dir", str(tmp_path / "models"), "--reranking"]) as svc:
        answers = {}
        for path in ("/v1/rerank", "/rerank", "/reranking", "/v1/reranking"):
            body = answers[path] = _post(svc, path, model="rank", query="a cat", documents=DOCS)
            assert body["model"] == "rank" and body["object"] == "list", (path, body)
            assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > len(DOCS), path
            assert sorted(r["index"] for r in body["results"]) == [0, 1, 2, 3], path
            scores = [r["relevance_score"] for r in body["results"]]
            assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4, path
        assert all(a["results"] == answers["/v1/rerank"]["results"] for a in answers.values())
        top = _post(svc, "/v1/reranking", model="rank", query="a cat", documents=DOCS, top_n=2)
        assert top["results"] == answers["/v1/rerank"]["results"][:2]
        tei = _post(svc, "/reranking", model="rank", query="a cat", texts=DOCS, return_text=True)
        assert [(r["index"], r["text"]) for r in tei] == [
            (r["index"], DOCS[r["index"]]) for r in answers["/v1/rerank"]["results"]
        ]
        assert _post(svc, "/v1/reranking", 400, query="a cat", documents=DOCS)["status"] == 400


def test_embeddings_without_v1_through_the_router(tmp_path: Path) -> None:
    """``/embeddings`` is llama-server's native route: a list with one entry per input, each the
    pooled vector as a one-row list, normalised unless ``embd_normalize`` is -1; the same vector
    as ``/v1/embeddings``."""
    write_tiny_bert(tmp_path / "models" / "bert.gguf")
    with ServiceProcess(tmp_path / "home", args=["--models-dir", str(tmp_path / "models"), "--embedding"]) as svc:
        native = _post(svc, "/embeddings", model="bert", input=["a cat", "hello"])
        assert isinstance(native, list) and [e["index"] for e in native] == [0, 1]
        assert all(len(e["embedding"]) == 1 and len(e["embedding"][0]) == 64 for e in native)
        unit = native[1]["embedding"][0]
        assert abs(math.hypot(*unit) - 1) < 1e-3
        raw = _post(svc, "/embeddings", model="bert", content="hello", embd_normalize=-1)[0]["embedding"][0]
        norm = math.hypot(*raw)
        assert abs(norm - 1) > 0.01 and max(abs(r / norm - u) for r, u in zip(raw, unit, strict=True)) < 1e-3
        oai = _post(svc, "/v1/embeddings", model="bert", input="hello")["data"][0]["embedding"]
        assert max(abs(x - y) for x, y in zip(oai, unit, strict=True)) < 1e-3, "the same vector"
        assert _post(svc, "/embeddings", 400, input="hello")["status"] == 400
