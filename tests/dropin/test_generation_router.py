"""llama-server's generation behaviour through the router (issue 20 §4, §5, §6 and the FIM llama).

One ``modelrouter serve --models-preset`` over tiny real GGUFs, every request
naming its model. Its sections are llama-server options, as llama.cpp's
router passes them to each child:

* ``tiny``: ``-c 512 -np 2`` (each slot 256 cells, as llama-server shares ``-c``);
* ``unified``: the same with ``--kv-unified`` (each slot may fill all 512);
* ``shift``: the same as ``tiny`` with ``--context-shift``;
* ``fim``: a llama with fill-in-the-middle tokens, for ``/infill``;
* ``tools``: a Hermes-style template and weights that answer every chat with
  two tool calls (``devtools.tiny_gguf``'s ``reply``), for parallel calls.

The expectations are those of the worker-level tests
(``tests/workers/inference/http/test_llama_shapes.py``, ``test_infill_slots.py``,
``tests/workers/inference/engine/test_batch_engine.py``) and of llama.cpp's
``tools/server`` (``server-task.cpp``, ``server-context.cpp``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import TOOLS_TEMPLATE, write_tiny_gguf

WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"city": "Rome"}}\n</tool_call>'


def _tool(name: str) -> dict[str, Any]:
    city = {"type": "string", "enum": ["Paris", "Rome"]}
    params = {"type": "object", "properties": {"city": city}, "required": ["city"], "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": f"{name} of a city", "parameters": params}}


TOOLS = [_tool("get_weather"), _tool("get_time")]
HELLO = [{"role": "user", "content": "hello"}]
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("generation-router")
    files = root / "files"
    tiny = write_tiny_gguf(files / "tiny.gguf", n_ctx=1024)
    fim = write_tiny_gguf(files / "fim.gguf", fim=True)
    # Every chat is answered with both calls, written as the template's (Hermes) syntax writes them.
    tools = write_tiny_gguf(files / "tools.gguf", seed=6, chat_template=TOOLS_TEMPLATE, n_ctx=1024,
                            reply=f"{WEATHER_CALL}\n{TIME_CALL}")  # fmt: skip
    preset = root / "models.ini"
    preset.write_text(
        f"[tiny]\nmodel = {tiny}\nc = 512\nnp = 2\n\n"
        f"[unified]\nmodel = {tiny}\nc = 512\nnp = 2\nkv-unified = true\n\n"
        f"[shift]\nmodel = {tiny}\nc = 512\nnp = 2\ncontext-shift = true\n\n"
        f"[fim]\nmodel = {fim}\n\n"
        f"[tools]\nmodel = {tools}\nc = 1024\nnp = 1\njinja = true\n"
    )
    args = ["--models-preset", str(preset), "--models-max", "0"]
    with ServiceProcess(root / "home", args=args) as proc:
        yield proc


def _post(svc: ServiceProcess, path: str, model: str = "tiny", status: int = 200, **body: Any) -> Any:
    answer = httpx.post(f"{svc.url}{path}", json={"model": model, **body}, timeout=120)
    assert answer.status_code == status, answer.text
    return answer.json()


def _events(svc: ServiceProcess, path: str, model: str = "tiny", **body: Any) -> tuple[list[Any], bool]:
    """A stream's ``data:`` payloads (parsed) and whether it ended with ``data: [DONE]``."""
    payload = {"model": model, **body, "stream": True}
    with httpx.stream("POST", f"{svc.url}{path}", json=payload, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    done = bool(lines) and lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines if line != "[DONE]"], done


# -- §4 shapes ----------------------------------------------------------------------------


def test_every_streamed_chat_delta_but_the_last_carries_content(svc: ServiceProcess) -> None:
    """llama-server's first delta is ``{"role":"assistant","content":null}``; every later one until
    the finish carries text (OpenAI-style clients index ``delta["content"]``)."""
    body = {"messages": HELLO, "max_tokens": 5, "temperature": 0, "ignore_eos": True}
    chunks, done = _events(svc, "/v1/chat/completions", **body)
    assert done
    deltas = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None]
    first, *rest = deltas
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert rest and all(isinstance(c["choices"][0]["delta"]["content"], str) for c in rest)
    assert all("role" not in c["choices"][0]["delta"] for c in rest)
    last = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is not None]
    assert [c["choices"][0]["finish_reason"] for c in last] == ["length"]
    whole = _post(svc, "/v1/chat/completions", **body)["choices"][0]["message"]["content"]
    assert "".join(c["choices"][0]["delta"]["content"] for c in rest) == whole


def test_a_prompt_over_the_context_is_llama_servers_error(svc: ServiceProcess) -> None:
    """400 ``exceed_context_size_error`` naming the prompt's size and the slot's context (256 of ``-c 512 -np 2``)."""
    for path, body in (
        ("/v1/completions", {"prompt": [7] * 300, "max_tokens": 1}),
        ("/completion", {"prompt": [7] * 300, "n_predict": 1}),
        ("/v1/completions", {"prompt": "word " * 400, "max_tokens": 1}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 600}], "max_tokens": 1}),
    ):
        error = _post(svc, path, status=400, **body)["error"]
        assert error["type"] == "exceed_context_size_error" and error["code"] == 400, (path, error)
        assert error["n_ctx"] == 256 and error["n_prompt_tokens"] > 256 and error["message"]
    error = _post(svc, "/v1/completions", status=400, prompt=[7] * 300)["error"]
    assert error["n_prompt_tokens"] == 300
    # A prompt that leaves room is served.
    assert _post(svc, "/v1/completions", prompt=[7] * 240, max_tokens=2)["usage"]["prompt_tokens"] == 240


# -- §5 generation ------------------------------------------------------------------------


def test_context_shift_goes_on_and_without_it_the_context_end_stops(svc: ServiceProcess) -> None:
    """Without ``--context-shift`` a full slot ends the reply (``limit``, ``truncated``; OpenAI's
    ``length``); with it the oldest tokens after ``n_keep`` make room and the reply runs its length."""
    body = {"prompt": [7] * 200, "n_predict": 120, "temperature": 0, "ignore_eos": True}
    stopped = _post(svc, "/completion", **body)
    assert stopped["stop_type"] == "limit" and stopped["truncated"] is True
    assert 0 < stopped["tokens_predicted"] < 60, "the slot holds 256: 200 prompt tokens leave ~56"
    oai = _post(svc, "/v1/completions", prompt=[7] * 200, max_tokens=120, temperature=0, ignore_eos=True)
    assert oai["choices"][0]["finish_reason"] == "length" and oai["usage"]["completion_tokens"] < 60
    shifted = _post(svc, "/completion", model="shift", **body, n_keep=16)
    assert shifted["tokens_predicted"] == 120 and shifted["truncated"] is True
    assert shifted["stop_type"] == "limit"
    assert shifted["content"].startswith(stopped["content"]), "the same text up to the shift"
    assert _post(svc, "/completion", model="shift", status=400, **body, n_keep=-5)["error"]["message"]
    short = _post(svc, "/completion", model="shift", prompt=[7] * 20, n_predict=4, temperature=0)
    assert short["truncated"] is False, "a reply that fits is not truncated"


def test_n_probs_on_completion(svc: ServiceProcess) -> None:
    """llama-server's ``completion_probabilities``: per token its id, text, bytes, logprob and the
    ``n_probs`` likeliest; streamed, each partial carries its own token's."""
    body = {"prompt": "once upon a time", "n_probs": 5, "temperature": 0, "n_predict": 4, "ignore_eos": True}
    whole = _post(svc, "/completion", **body)
    probs = whole["completion_probabilities"]
    assert len(probs) == whole["tokens_predicted"] == 4
    for tok in probs:
        assert set(tok) == {"id", "token", "bytes", "logprob", "top_logprobs"}
        assert isinstance(tok["id"], int) and isinstance(tok["token"], str) and isinstance(tok["bytes"], list)
        assert tok["logprob"] <= 0.0 and len(tok["top_logprobs"]) == 5
        assert tok["top_logprobs"][0]["id"] == tok["id"], "greedy: the chosen token is the likeliest"
        assert all(p["logprob"] <= 0.0 and set(p) == {"id", "token", "bytes", "logprob"} for p in tok["top_logprobs"])
        assert [p["logprob"] for p in tok["top_logprobs"]] == sorted((p["logprob"] for p in tok["top_logprobs"]),
                                                                     reverse=True)  # fmt: skip
    assert bytes(b for tok in probs for b in tok["bytes"]).decode(errors="replace") == whole["content"]
    streamed, done = _events(svc, "/completion", **body)
    assert not done, "llama-server's native stream has no [DONE]"
    partial = [c for c in streamed if not c["stop"] and "completion_probabilities" in c]
    assert all(len(c["completion_probabilities"]) == 1 for c in partial)
    assert [c["completion_probabilities"][0]["id"] for c in partial] == [p["id"] for p in probs]
    assert "completion_probabilities" not in _post(svc, "/completion", **{**body, "n_probs": 0})
    assert _post(svc, "/completion", status=400, **{**body, "n_probs": -1})["error"]["message"]


def test_logprobs_on_openai_routes(svc: ServiceProcess) -> None:
    """Chat: ``logprobs: true`` and ``top_logprobs: N`` give ``choices[].logprobs.content``, one
    entry per token with its ``N`` likeliest; ``/v1/completions``: ``logprobs: N``."""
    chat = _post(svc, "/v1/chat/completions", messages=HELLO, max_tokens=4, temperature=0, ignore_eos=True,
                 logprobs=True, top_logprobs=3)  # fmt: skip
    choice = chat["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == chat["usage"]["completion_tokens"] == 4
    for tok in content:  # llama-server's entries: OpenAI's members and the token's id
        assert set(tok) == {"id", "token", "bytes", "logprob", "top_logprobs"} and tok["logprob"] <= 0.0
        assert len(tok["top_logprobs"]) == 3, "three alternatives, even bytes that are not UTF-8 alone"
        assert len({p["id"] for p in tok["top_logprobs"]}) == 3
        assert all(set(p) == {"id", "token", "bytes", "logprob"} and p["logprob"] <= 0.0 for p in tok["top_logprobs"])
        assert tok["top_logprobs"][0]["id"] == tok["id"], "greedy: the chosen token is the likeliest"
    assert bytes(b for tok in content for b in tok["bytes"]).decode(errors="replace") == choice["message"]["content"]
    plain = _post(svc, "/v1/chat/completions", messages=HELLO, max_tokens=4, temperature=0)["choices"][0]
    assert not plain.get("logprobs")
    # llama-server: ``logprobs`` alone gives the 20 likeliest; ``top_logprobs`` alone is refused.
    default = _post(svc, "/v1/chat/completions", messages=HELLO, max_tokens=2, ignore_eos=True,
                    logprobs=True)["choices"][0]  # fmt: skip
    assert [len(tok["top_logprobs"]) for tok in default["logprobs"]["content"]] == [20, 20]
    refused = _post(svc, "/v1/chat/completions", status=400, messages=HELLO, max_tokens=2, top_logprobs=3)
    assert refused["error"]["message"] == "top_logprobs requires logprobs to be set to true"
    # Streamed: the chunks' entries are the whole answer's.
    chunks, _ = _events(svc, "/v1/chat/completions", messages=HELLO, max_tokens=4, temperature=0, ignore_eos=True,
                        logprobs=True, top_logprobs=3)  # fmt: skip
    streamed = [e for c in chunks if c["choices"] for e in (c["choices"][0].get("logprobs") or {}).get("content", [])]
    assert streamed == content

    text = _post(svc, "/v1/completions", prompt="once upon", max_tokens=3, temperature=0, ignore_eos=True,
                 logprobs=2)["choices"][0]  # fmt: skip
    lp = text["logprobs"]
    assert lp is not None
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 3
    assert all(v <= 0 for v in lp["token_logprobs"]) and all(len(t) >= 1 for t in lp["top_logprobs"])
    assert _post(svc, "/v1/completions", prompt="once", max_tokens=2)["choices"][0]["logprobs"] is None


def test_cache_prompt_reuses_the_prefix_unless_told_not_to(svc: ServiceProcess) -> None:
    """The second request of a shared prefix takes it from its slot's cache (``timings.cache_n``,
    chat ``usage.prompt_tokens_details.cached_tokens``); ``cache_prompt: false`` evaluates it all."""
    prefix = "The quick brown fox jumps over the lazy dog near the river bank. "
    first = _post(svc, "/completion", prompt=prefix, n_predict=2, temperature=0)
    n_first = first["tokens_evaluated"]
    assert first["timings"]["prompt_n"] + first["timings"]["cache_n"] == n_first
    second = _post(svc, "/completion", prompt=prefix + "And then?", n_predict=2, temperature=0)
    assert second["timings"]["cache_n"] >= n_first - 1, second["timings"]
    assert second["timings"]["prompt_n"] == second["tokens_evaluated"] - second["timings"]["cache_n"]
    assert second["tokens_cached"] >= second["tokens_evaluated"]
    fresh = _post(svc, "/completion", prompt=prefix + "And then?", n_predict=2, temperature=0, cache_prompt=False)
    assert fresh["timings"]["cache_n"] == 0 and fresh["timings"]["prompt_n"] == fresh["tokens_evaluated"]
    assert fresh["content"] == second["content"], "the cache changes the cost, not the answer"

    turn = [{"role": "user", "content": "Tell me about the quick brown fox and the lazy dog."}]
    r1 = _post(svc, "/v1/chat/completions", messages=turn, max_tokens=2, temperature=0)
    r2 = _post(svc, "/v1/chat/completions", messages=[*turn, {"role": "assistant", "content": "ok"},
                                                      {"role": "user", "content": "more"}], max_tokens=2)  # fmt: skip
    cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == r2["timings"]["cache_n"] >= r1["usage"]["prompt_tokens"] - 1
    r3 = _post(svc, "/v1/chat/completions", messages=turn, max_tokens=2, temperature=0, cache_prompt=False)
    assert r3["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 == r3["timings"]["cache_n"]


def test_a_seed_gives_the_same_sampled_text_streamed_or_not(svc: ServiceProcess) -> None:
    """At temperature 1.5 the text depends on the seed, and only on it: whole and streamed agree."""
    body = {"max_tokens": 8, "temperature": 1.5, "ignore_eos": True}
    whole = _post(svc, "/v1/completions", prompt="once upon", seed=7, **body)["choices"][0]["text"]
    chunks, _ = _events(svc, "/v1/completions", prompt="once upon", seed=7, **body)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == whole and whole
    other = _post(svc, "/v1/completions", prompt="once upon", seed=8, **body)["choices"][0]["text"]
    assert other != whole, "another seed samples another text"

    native = {"prompt": "once upon", "n_predict": 8, "temperature": 1.5, "seed": 11, "ignore_eos": True}
    text = _post(svc, "/completion", **native)["content"]
    parts, _ = _events(svc, "/completion", **native)
    assert "".join(c["content"] for c in parts) == text

    chat = {"messages": HELLO, "seed": 5, **body}
    said = _post(svc, "/v1/chat/completions", **chat)["choices"][0]["message"]["content"]
    deltas, _ = _events(svc, "/v1/chat/completions", **chat)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in deltas if c["choices"]) == said


def test_n_and_n_cmpl_give_several_choices(svc: ServiceProcess) -> None:
    """``n`` (OpenAI) and ``n_cmpl`` (native: an array) run side by side on the slots, each child
    with the request's seed; more than the model's slots (2) is a 400."""
    body = {"prompt": "once upon", "max_tokens": 6, "temperature": 1.5, "seed": 7, "ignore_eos": True}
    one = _post(svc, "/v1/completions", **body)
    many = _post(svc, "/v1/completions", **body, n=2)
    assert [c["index"] for c in many["choices"]] == [0, 1]
    assert [c["text"] for c in many["choices"]] == [one["choices"][0]["text"]] * 2, "children copy the seed"
    assert many["usage"]["completion_tokens"] == 2 * one["usage"]["completion_tokens"]
    chunks, done = _events(svc, "/v1/completions", **body, n=2)
    assert done
    texts = ["".join(c["choices"][0]["text"] for c in chunks if c["choices"] and c["choices"][0]["index"] == i)
             for i in (0, 1)]  # fmt: skip
    assert texts == [one["choices"][0]["text"]] * 2
    native = _post(svc, "/completion", prompt="once upon", n_predict=4, temperature=0, n_cmpl=2)
    assert isinstance(native, list) and [a["index"] for a in native] == [0, 1]
    assert native[0]["content"] == native[1]["content"] and all(a["stop"] for a in native)
    chat = _post(svc, "/v1/chat/completions", messages=HELLO, max_tokens=3, n=2)
    assert [c["index"] for c in chat["choices"]] == [0, 1]
    too_many = _post(svc, "/v1/completions", status=400, prompt="x", n=3)["error"]["message"]
    assert "at most the number of slots" in too_many


def test_kv_unified_lets_each_slot_use_the_whole_context(svc: ServiceProcess) -> None:
    """``-c 512 -np 2``: each slot 256 cells; with ``--kv-unified`` each may fill all 512."""
    for model, per_slot in (("tiny", 256), ("unified", 512)):
        props = httpx.get(f"{svc.url}/props", params={"model": model}, timeout=120)
        assert props.status_code == 200, props.text
        assert props.json()["default_generation_settings"]["n_ctx"] == per_slot, model
        slots = httpx.get(f"{svc.url}/slots", params={"model": model}, timeout=30).json()
        assert len(slots) == 2 and {s["n_ctx"] for s in slots} == {per_slot}, (model, slots)
        error = _post(svc, "/v1/completions", model=model, status=400, prompt=[7] * per_slot)["error"]
        assert error["type"] == "exceed_context_size_error" and error["n_ctx"] == per_slot
    # 300 prompt tokens: over a slot's share, within the unified pool.
    assert _post(svc, "/v1/completions", model="unified", prompt=[7] * 300, max_tokens=2)["usage"]["prompt_tokens"]
    assert _post(svc, "/v1/completions", status=400, prompt=[7] * 300, max_tokens=2)["error"]["n_ctx"] == 256


# -- the FIM llama --------------------------------------------------------------------------


def test_infill_through_the_router(svc: ServiceProcess) -> None:
    """``[BOS] FIM_PRE prefix FIM_SUF suffix FIM_MID``, answered in the native ``/completion`` shape,
    whole and streamed; ``input_suffix`` missing is llama-server's 400."""
    body = {"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 3, "temperature": 0, "ignore_eos": True}
    piece = {"add_special": False, "parse_special": False}
    n_prefix = len(_post(svc, "/tokenize", model="fim", content="def f(", **piece)["tokens"])
    n_suffix = len(_post(svc, "/tokenize", model="fim", content="):\n", **piece)["tokens"])
    whole = _post(svc, "/infill", model="fim", **body)
    assert whole["stop"] is True and whole["tokens_evaluated"] == 4 + n_prefix + n_suffix
    assert whole["tokens_predicted"] == 3 and isinstance(whole["content"], str) and whole["content"]
    assert whole["model"] == "fim" and "timings" in whole
    parts, done = _events(svc, "/infill", model="fim", **body)
    assert not done and parts[-1]["stop"] is True
    assert "".join(c["content"] for c in parts) == whole["content"]
    missing = _post(svc, "/infill", model="fim", status=400, input_prefix="a")["error"]
    assert '"input_suffix" is required' in missing["message"]


# -- §3 parallel tool calls -------------------------------------------------------------------


def test_parallel_tool_calls_in_one_answer(svc: ServiceProcess) -> None:
    """The ``tools`` model writes two calls to every chat. ``tool_choice: required`` with
    ``parallel_tool_calls: true``: the grammar admits both and the answer has both, as by default
    (llama-server's: the template writes several calls); with ``false`` the grammar admits one."""
    ask = [{"role": "user", "content": "Weather in Paris and time in Rome?"}]
    body = {"messages": ask, "tools": TOOLS, "tool_choice": "required", "max_tokens": 200, "temperature": 0}
    both = _post(svc, "/v1/chat/completions", model="tools", **body, parallel_tool_calls=True)["choices"][0]
    assert both["finish_reason"] == "tool_calls" and not both["message"].get("content")
    calls = both["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {"city": "Rome"})]  # fmt: skip
    assert all(c["type"] == "function" and c["id"] for c in calls) and len({c["id"] for c in calls}) == 2

    # llama-server's default is the template's: this one writes several calls of one message.
    default = _post(svc, "/v1/chat/completions", model="tools", **body)["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in default] == ["get_weather", "get_time"]

    single = _post(svc, "/v1/chat/completions", model="tools", **body, parallel_tool_calls=False)["choices"][0]
    assert single["finish_reason"] == "tool_calls"
    (call,) = single["message"]["tool_calls"]
    assert call["function"]["name"] in ("get_weather", "get_time")
    assert json.loads(call["function"]["arguments"])["city"] in ("Paris", "Rome")

    # Streamed: each call's first delta has its index, id and name; the arguments join to the whole's.
    chunks, done = _events(svc, "/v1/chat/completions", model="tools", **body, parallel_tool_calls=True)
    assert done
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for chunk in chunks:
        for delta in (chunk["choices"][0]["delta"].get("tool_calls") or []) if chunk["choices"] else []:
            if delta.get("id"):
                names[delta["index"]] = delta["function"]["name"]
            args[delta["index"]] = args.get(delta["index"], "") + (delta["function"].get("arguments") or "")
    assert names == {0: "get_weather", 1: "get_time"}
    assert [json.loads(args[i]) for i in (0, 1)] == [{"city": "Paris"}, {"city": "Rome"}]
