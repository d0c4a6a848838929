"""Generation checks that read the same in router mode and single-model mode (issue 20 §5): each
takes ``post(path, status=200, **body)`` and ``events(path, **body)`` bound to one model, naming it
(``test_generation_router.py``) or not (``test_generation_single.py``). The model is the tiny llama
with 2 slots; expectations are llama-server's (``server-task.cpp``, ``server-context.cpp``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Post = Callable[..., Any]
"""``post(path, status=200, **body)``: the parsed answer, its status asserted."""
Events = Callable[..., tuple[list[Any], bool]]
"""``events(path, **body)``: a stream's ``data:`` payloads and whether it ended with ``[DONE]``."""
HELLO = [{"role": "user", "content": "hello"}]


def _check_top(tok: dict[str, Any], n: int) -> None:
    """One token's entry in llama-server's probabilities: its members and its ``n`` likeliest."""
    assert set(tok) == {"id", "token", "bytes", "logprob", "top_logprobs"} and tok["logprob"] <= 0.0
    assert isinstance(tok["id"], int) and isinstance(tok["token"], str) and isinstance(tok["bytes"], list)
    top = tok["top_logprobs"]
    assert len(top) == n and len({p["id"] for p in top}) == n, "n alternatives, even bytes that are not UTF-8 alone"
    assert all(set(p) == {"id", "token", "bytes", "logprob"} and p["logprob"] <= 0.0 for p in top)
    assert [p["logprob"] for p in top] == sorted((p["logprob"] for p in top), reverse=True)
    assert top[0]["id"] == tok["id"], "greedy: the chosen token is the likeliest"


def n_probs_on_completion(post: Post, events: Events) -> None:
    body = {"prompt": "once upon a time", "n_probs": 5, "temperature": 0, "n_predict": 4, "ignore_eos": True}
    whole = post("/completion", **body)
    probs = whole["completion_probabilities"]
    assert len(probs) == whole["tokens_predicted"] == 4
    for tok in probs:
        _check_top(tok, 5)
    assert bytes(b for tok in probs for b in tok["bytes"]).decode(errors="replace") == whole["content"]
    streamed, done = events("/completion", **body)
    assert not done, "llama-server's native stream has no [DONE]"
    partial = [c for c in streamed if not c["stop"] and "completion_probabilities" in c]
    assert [c["completion_probabilities"] for c in partial] == [[p] for p in probs], "each its own token's"
    assert "completion_probabilities" not in post("/completion", **{**body, "n_probs": 0})
    assert post("/completion", status=400, **{**body, "n_probs": -1})["error"]["message"]


def logprobs_on_openai_routes(post: Post, events: Events) -> None:
    body = {
        "messages": HELLO,
        "max_tokens": 4,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 3,
    }
    chat = post("/v1/chat/completions", **body)
    choice = chat["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == chat["usage"]["completion_tokens"] == 4
    for tok in content:  # llama-server's entries: OpenAI's members and the token's id
        _check_top(tok, 3)
    assert bytes(b for tok in content for b in tok["bytes"]).decode(errors="replace") == choice["message"]["content"]
    assert not post("/v1/chat/completions", messages=HELLO, max_tokens=4, temperature=0)["choices"][0].get("logprobs")
    # llama-server: ``logprobs`` alone gives the 20 likeliest; ``top_logprobs`` alone is refused.
    default = post("/v1/chat/completions", messages=HELLO, max_tokens=2, ignore_eos=True, logprobs=True)
    assert [len(tok["top_logprobs"]) for tok in default["choices"][0]["logprobs"]["content"]] == [20, 20]
    refused = post("/v1/chat/completions", status=400, messages=HELLO, max_tokens=2, top_logprobs=3)
    assert refused["error"]["message"] == "top_logprobs requires logprobs to be set to true"
    # Streamed: the chunks' entries are the whole answer's.
    chunks, _ = events("/v1/chat/completions", **body)
    streamed = [e for c in chunks if c["choices"] for e in (c["choices"][0].get("logprobs") or {}).get("content", [])]
    assert streamed == content

    text = post("/v1/completions", prompt="once upon", max_tokens=3, temperature=0, ignore_eos=True, logprobs=2)
    lp = text["choices"][0]["logprobs"]
    assert lp is not None
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 3
    assert all(v <= 0 for v in lp["token_logprobs"]) and all(len(t) >= 1 for t in lp["top_logprobs"])
    assert post("/v1/completions", prompt="once", max_tokens=2)["choices"][0]["logprobs"] is None


def cache_prompt_reuses_the_prefix(post: Post) -> None:
    prefix = "The quick brown fox jumps over the lazy dog near the river bank. "
    first = post("/completion", prompt=prefix, n_predict=2, temperature=0)
    n_first = first["tokens_evaluated"]
    assert first["timings"]["prompt_n"] + first["timings"]["cache_n"] == n_first
    second = post("/completion", prompt=prefix + "And then?", n_predict=2, temperature=0)
    assert second["timings"]["cache_n"] >= n_first - 1, second["timings"]
    assert second["timings"]["prompt_n"] == second["tokens_evaluated"] - second["timings"]["cache_n"]
    assert second["tokens_cached"] >= second["tokens_evaluated"]
    fresh = post("/completion", prompt=prefix + "And then?", n_predict=2, temperature=0, cache_prompt=False)
    assert fresh["timings"]["cache_n"] == 0 and fresh["timings"]["prompt_n"] == fresh["tokens_evaluated"]
    assert fresh["content"] == second["content"], "the cache changes the cost, not the answer"

    turn = [{"role": "user", "content": "Tell me about the quick brown fox and the lazy dog."}]
    r1 = post("/v1/chat/completions", messages=turn, max_tokens=2, temperature=0)
    r2 = post(
        "/v1/chat/completions",
        messages=[*turn, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}],
        max_tokens=2,
    )
    cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == r2["timings"]["cache_n"] >= r1["usage"]["prompt_tokens"] - 1
    r3 = post("/v1/chat/completions", messages=turn, max_tokens=2, temperature=0, cache_prompt=False)
    assert r3["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 == r3["timings"]["cache_n"]


def seed_gives_the_same_text_streamed_or_not(post: Post, events: Events) -> None:
    body = {"max_tokens": 8, "temperature": 1.5, "ignore_eos": True}
    whole = post("/v1/completions", prompt="once upon", seed=7, **body)["choices"][0]["text"]
    chunks, _ = events("/v1/completions", prompt="once upon", seed=7, **body)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == whole and whole
    other = post("/v1/completions", prompt="once upon", seed=8, **body)["choices"][0]["text"]
    assert other != whole, "another seed samples another text"

    native = {"prompt": "once upon", "n_predict": 8, "temperature": 1.5, "seed": 11, "ignore_eos": True}
    text = post("/completion", **native)["content"]
    parts, _ = events("/completion", **native)
    assert "".join(c["content"] for c in parts) == text

    chat = {"messages": HELLO, "seed": 5, **body}
    said = post("/v1/chat/completions", **chat)["choices"][0]["message"]["content"]
    deltas, _ = events("/v1/chat/completions", **chat)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in deltas if c["choices"]) == said


def n_and_n_cmpl_give_several_choices(post: Post, events: Events) -> None:
    body = {"prompt": "once upon", "max_tokens": 6, "temperature": 1.5, "seed": 7, "ignore_eos": True}
    one = post("/v1/completions", **body)
    many = post("/v1/completions", **body, n=2)
    assert [c["index"] for c in many["choices"]] == [0, 1]
    assert [c["text"] for c in many["choices"]] == [one["choices"][0]["text"]] * 2, "children copy the seed"
    assert many["usage"]["completion_tokens"] == 2 * one["usage"]["completion_tokens"]
    chunks, done = events("/v1/completions", **body, n=2)
    assert done
    texts = [
        "".join(c["choices"][0]["text"] for c in chunks if c["choices"] and c["choices"][0]["index"] == i)
        for i in (0, 1)
    ]
    assert texts == [one["choices"][0]["text"]] * 2
    native = post("/completion", prompt="once upon", n_predict=4, temperature=0, n_cmpl=2)
    assert isinstance(native, list) and [a["index"] for a in native] == [0, 1]
    assert native[0]["content"] == native[1]["content"] and all(a["stop"] for a in native)
    chat = post("/v1/chat/completions", messages=HELLO, max_tokens=3, n=2)
    assert [c["index"] for c in chat["choices"]] == [0, 1]
    too_many = post("/v1/completions", status=400, prompt="x", n=3)["error"]["message"]
    assert "at most the number of slots" in too_many


def logprob_tokens_join_to_the_text(post: Post, events: Events) -> None:
    """llama-server's ``token`` is the text its token released (``text_to_send``): the byte tokens of
    a split character give ``""`` then the whole character, a stray byte U+FFFD, so the entries'
    tokens joined are the reply (upstream ``test_logprobs``/``test_logprobs_stream``)."""
    chat = {"messages": HELLO, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "logprobs": True}
    whole = post("/v1/chat/completions", **chat)["choices"][0]
    text = whole["message"]["content"]
    assert any(ord(c) > 127 for c in text), "the tiny model's reply has non-ASCII bytes (what this checks)"
    assert "".join(t["token"] for t in whole["logprobs"]["content"]) == text
    chunks, _ = events("/v1/chat/completions", **chat)
    choices = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None]
    streamed = "".join(c["delta"].get("content") or "" for c in choices)
    assert "".join(t["token"] for c in choices for t in (c.get("logprobs") or {}).get("content", [])) == streamed
    native = post("/completion", prompt="hello", n_predict=24, temperature=0, ignore_eos=True, n_probs=2)
    assert "".join(t["token"] for t in native["completion_probabilities"]) == native["content"]
    lone = [p for t in native["completion_probabilities"] for p in t["top_logprobs"] if len(p["bytes"]) == 1]
    assert {p["token"] for p in lone if p["bytes"][0] >= 0x80} == {"", "\ufffd"}, "lead and continuation bytes"
    for p in (p for p in lone if p["bytes"][0] >= 0x80):  # a lead byte is cut (validate_utf8), others U+FFFD
        assert p["token"] == ("" if 0xC0 <= p["bytes"][0] < 0xF8 else "\ufffd"), p
