"""llama-server's response shapes and request forms on the batch engine's worker.

The first streamed chat delta carries ``content``; a prompt over the context
is ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``;
``logit_bias`` in its pair and text forms; ``ignore_eos``; prompts given as
objects or as strings mixed with token ids; each slot's share of ``-c``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import IM_END_ID, write_tiny_gguf
from tests.workers.conftest import WorkerProc


def _post(url: str, path: str, status: int = 200, **body: Any) -> Any:
    r = httpx.post(url + path, json=body, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


@pytest.mark.timeout(60)
def test_every_streamed_chat_delta_but_the_last_carries_content(ready_worker: WorkerProc) -> None:
    """OpenAI-style clients index ``delta["content"]``: llama-server's first delta is role plus null content."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{ready_worker.endpoint}/v1/chat/completions", json=body, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    chunks = [json.loads(line[6:]) for line in lines]
    first, *rest = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(isinstance(c["choices"][0]["delta"]["content"], str) for c in rest)


@pytest.mark.timeout(60)
def test_a_prompt_over_the_context_names_its_size(ready_worker: WorkerProc) -> None:
    for prompt in ([7] * 300, "word " * 400, "x" * 5000):
        error = _post(ready_worker.endpoint, "/v1/completions", 400, prompt=prompt, max_tokens=1)["error"]
        assert error["type"] == "exceed_context_size_error" and error["n_ctx"] == 256
        assert error["n_prompt_tokens"] > 255
    error = _post(ready_worker.endpoint, "/v1/completions", 400, prompt=[7] * 300)["error"]
    assert error["n_prompt_tokens"] == 300


@pytest.mark.timeout(60)
def test_logit_bias_pairs_text_keys_and_ignore_eos(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    base = {"prompt": "once", "n_predict": 5, "temperature": 0}
    forced = _post(url, "/completion", **base, logit_bias=[[65 + 6, 100]])  # <0x41> is "A" (id 6 + 0x41)
    assert forced["content"] == "AAAAA"
    as_object = _post(url, "/completion", **base, logit_bias={"71": 100})
    assert as_object["content"] == "AAAAA"
    banned = _post(url, "/completion", **base, logit_bias=[[71, 100], ["A", False]])
    assert "A" not in banned["content"]
    eos = {**base, "logit_bias": [[IM_END_ID, 100]]}
    ended = _post(url, "/completion", **eos)
    assert ended["stop_type"] == "eos" and ended["content"] == ""
    # llama-server counts the end-of-generation token (n_decoded), though it has no text.
    assert ended["tokens_predicted"] == ended["timings"]["predicted_n"] == 1
    oai = _post(url, "/v1/completions", prompt="once", max_tokens=5, temperature=0, logit_bias={str(IM_END_ID): 100})
    assert oai["choices"][0]["finish_reason"] == "stop" and oai["usage"]["completion_tokens"] == 1
    ignored = _post(url, "/completion", **eos, ignore_eos=True)
    assert ignored["stop_type"] == "limit" and ignored["tokens_predicted"] == 5
    assert "logit_bias" in _post(url, "/completion", 400, **base, logit_bias=[[71]])["error"]["message"]


@pytest.mark.timeout(60)
def test_prompts_as_objects_and_mixed_tokens(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    base = {"n_predict": 4, "temperature": 0}
    plain = _post(url, "/completion", prompt="hello there", **base)
    assert _post(url, "/completion", prompt={"prompt_string": "hello there"}, **base)["content"] == plain["content"]
    ids = _post(url, "/tokenize", content="hello there", add_special=True)["tokens"]
    # A leading token id: the text after it gets no BOS of its own (llama-server's tokenize_mixed).
    mixed = _post(url, "/completion", prompt=[ids[0], "hello there"], **base)
    assert mixed["tokens_evaluated"] == len(ids) and mixed["content"] == plain["content"]
    mm = _post(url, "/completion", 400, prompt={"prompt_string": "x", "multimodal_data": ["AAAA"]}, **base)
    assert "multimodal" in mm["error"]["message"]


@pytest.mark.timeout(120)
def test_each_slot_gets_its_share_of_the_context(spawn_worker: Any, tmp_path: Path) -> None:
    """llama-server's ``-c 1024 -np 4``: 256 cells per slot; ``--kv-unified``: each slot may use all 1024."""
    model = write_tiny_gguf(tmp_path / "long.gguf", n_ctx=2048)
    split = spawn_worker(model, "-c", "1024", "-np", "4")
    unified = spawn_worker(model, "-c", "1024", "-np", "4", "--kv-unified")
    for worker, per_slot in ((split, 256), (unified, 1024)):
        url = worker.wait_ready()
        slots = httpx.get(f"{url}/slots", timeout=30).json()
        assert len(slots) == 4 and {s["n_ctx"] for s in slots} == {per_slot}
        assert httpx.get(f"{url}/props", timeout=30).json()["default_generation_settings"]["n_ctx"] == per_slot
        error = _post(url, "/v1/completions", 400, prompt=[7] * per_slot)["error"]
        assert error["n_ctx"] == per_slot
        assert _post(url, "/v1/completions", prompt=[7] * (per_slot - 8), max_tokens=2)["usage"]["prompt_tokens"]


@pytest.mark.timeout(120)
def test_context_shift_goes_on_past_the_context_end(spawn_worker: Any, tiny_gguf: Path) -> None:
    """Without ``--context-shift`` a full context ends the reply (``limit``); with it the oldest
    tokens after ``n_keep`` make room and the reply runs its length. Both are ``truncated``, as
    llama-server marks them."""
    shifting = spawn_worker(tiny_gguf, "-c", "256", "-np", "1", "--context-shift")
    plain = spawn_worker(tiny_gguf, "-c", "256", "-np", "1")
    body = {"prompt": [7] * 200, "n_predict": 120, "temperature": 0, "ignore_eos": True}
    stopped = _post(plain.wait_ready(), "/completion", **body)
    assert stopped["stop_type"] == "limit" and stopped["tokens_predicted"] < 60 and stopped["truncated"]
    url = shifting.wait_ready()
    shifted = _post(url, "/completion", **body, n_keep=16)
    assert shifted["tokens_predicted"] == 120 and shifted["truncated"] is True
    assert shifted["content"][: len(stopped["content"])] == stopped["content"], "the same text up to the shift"
    assert _post(url, "/completion", 400, **body, n_keep=-5)["error"]["message"]
    short = _post(url, "/completion", prompt=[7] * 20, n_predict=4, temperature=0)
    assert short["truncated"] is False, "a reply that fits is not truncated"


def _sse(url: str, path: str, **body: Any) -> list[Any]:
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


@pytest.mark.timeout(120)
def test_n_completions_and_seeds_streamed_or_not(spawn_worker: Any, tiny_gguf: Path) -> None:
    """``n``/``n_cmpl`` give that many choices (native: an array), each of the same seed the same
    text, streamed or not; a seeded sampled reply is the same streamed and whole."""
    url = spawn_worker(tiny_gguf, "-np", "3").wait_ready()
    body = {"prompt": "once upon", "max_tokens": 6, "temperature": 1.5, "seed": 7, "ignore_eos": True}
    whole = _post(url, "/v1/completions", **body)
    streamed = "".join(c["choices"][0]["text"] for c in _sse(url, "/v1/completions", **body) if c["choices"])
    assert streamed == whole["choices"][0]["text"] and len(streamed) > 0
    many = _post(url, "/v1/completions", **body, n=3)
    assert [c["index"] for c in many["choices"]] == [0, 1, 2]
    assert {c["text"] for c in many["choices"]} == {whole["choices"][0]["text"]}, "children copy the seed"
    assert many["usage"]["completion_tokens"] == 3 * whole["usage"]["completion_tokens"]
    chunks = _sse(url, "/v1/completions", **body, n=2)
    texts = [
        "".join(c["choices"][0]["text"] for c in chunks if c["choices"] and c["choices"][0]["index"] == i)
        for i in (0, 1)
    ]
    assert texts == [streamed, streamed]
    native = _post(url, "/completion", prompt="once upon", n_predict=4, temperature=0, n_cmpl=2)
    assert isinstance(native, list) and [a["index"] for a in native] == [0, 1]
    assert native[0]["content"] == native[1]["content"]
    chat = _post(url, "/v1/chat/completions", messages=[{"role": "user", "content": "hi"}], max_tokens=3, n=2)
    assert [c["index"] for c in chat["choices"]] == [0, 1]
    assert "at most the number of slots" in _post(url, "/v1/completions", 400, prompt="x", n=4)["error"]["message"]
    assert _post(url, "/v1/completions", 400, prompt="x", n=0)["error"]["message"]


@pytest.mark.timeout(60)
def test_native_n_probs(ready_worker: WorkerProc) -> None:
    """llama-server's ``completion_probabilities``: per token its id, text, bytes, logprob and the
    ``n_probs`` likeliest (pre-sampling); streamed, each partial carries its own token's."""
    url = ready_worker.endpoint
    body = {"prompt": "once upon a time", "n_probs": 5, "temperature": 0, "n_predict": 4, "ignore_eos": True}
    whole = _post(url, "/completion", **body)
    probs = whole["completion_probabilities"]
    assert len(probs) == 4
    for tok in probs:
        assert isinstance(tok["id"], int) and isinstance(tok["token"], str) and isinstance(tok["bytes"], list)
        assert tok["logprob"] <= 0.0 and len(tok["top_logprobs"]) == 5
        assert tok["top_logprobs"][0]["id"] == tok["id"], "greedy: the chosen token is the likeliest"
        assert all(p["logprob"] <= 0.0 and set(p) == {"id", "token", "bytes", "logprob"} for p in tok["top_logprobs"])
    streamed = _sse(url, "/completion", **body)
    # A partial per token carries that token's (text a stop string held back comes later, without one).
    partial = [c for c in streamed if not c["stop"] and "completion_probabilities" in c]
    assert all(len(c["completion_probabilities"]) == 1 for c in partial)
    assert [c["completion_probabilities"][0]["id"] for c in partial] == [p["id"] for p in probs]
    assert "completion_probabilities" not in streamed[-1]
    assert "completion_probabilities" not in _post(url, "/completion", **{**body, "n_probs": 0})
    assert _post(url, "/completion", 400, **{**body, "n_probs": -1})["error"]["message"]
