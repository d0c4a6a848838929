"""The reply's token ids on llama-server's ``/completion`` (``tools/server/tests/unit/test_completion.py``):
the whole answer's ``tokens`` with ``return_tokens``, empty without; each streamed chunk's ``tokens``
always, the final chunk's empty. Served as ``llama-server -m FILE -c 1024`` would be."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)
BODY = {"prompt": "Write a joke about AI", "n_predict": 48, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("return-tokens")
    model = write_tiny_gguf(root / "tiny.gguf", n_ctx=1024)
    with ServiceProcess(root / "home", args=["-m", str(model), "-c", "1024"]) as p:
        yield p


def _complete(svc: ServiceProcess, **body: Any) -> dict[str, Any]:
    r = httpx.post(f"{svc.url}/completion", json={**BODY, **body}, timeout=120)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def _stream(svc: ServiceProcess, **body: Any) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{svc.url}/completion", json={**BODY, **body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def test_return_tokens_gives_the_reply_s_ids_and_none_without_it(server: ServiceProcess) -> None:
    answer = _complete(server, return_tokens=True, n_probs=1)
    tokens = answer["tokens"]
    assert all(type(t) is int for t in tokens) and len(tokens) == answer["tokens_predicted"] == 48
    assert tokens == [p["id"] for p in answer["completion_probabilities"]]  # the sampled tokens, in order
    plain = _complete(server)
    assert plain["tokens"] == [] and plain["content"] == answer["content"]
    assert _complete(server, return_tokens="yes")["tokens"] == []  # llama-server reads a boolean only


def test_the_ids_include_those_of_a_stop_string_the_content_leaves_out(server: ServiceProcess) -> None:
    """llama-server keeps every sampled token in ``tokens``; the stop string is cut from ``content``."""
    whole = _complete(server, return_tokens=True)
    stop = whole["content"][len(whole["content"]) // 2 :][:3]
    answer = _complete(server, return_tokens=True, stop=[stop])
    assert answer["stopping_word"] == stop and whole["content"].startswith(answer["content"] + stop)
    tokens = answer["tokens"]
    assert len(tokens) == answer["tokens_predicted"] and tokens == whole["tokens"][: len(tokens)]
    assert 0 < len(tokens) < len(whole["tokens"])
    *parts, _ = _stream(server, stop=[stop])
    assert [t for p in parts for t in p["tokens"]] == tokens  # the stop string's ids too, in a textless partial
    assert parts[-1]["tokens_predicted"] == len(tokens)


def test_each_streamed_chunk_carries_its_tokens(server: ServiceProcess) -> None:
    chunks = _stream(server, n_probs=1)
    *parts, last = chunks
    assert last["stop"] is True and last["tokens"] == [] and last["content"] == ""
    assert parts and all(p["tokens"] and all(type(t) is int for t in p["tokens"]) for p in parts)
    streamed = [t for p in parts for t in p["tokens"]]
    assert streamed == _complete(server, return_tokens=True)["tokens"]
    assert [p["tokens_predicted"] for p in parts] == list(itertools.accumulate(len(p["tokens"]) for p in parts))
    assert streamed == [p["id"] for part in parts for p in part["completion_probabilities"]]
