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
from tests.dropin import generation_checks as checks

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
    tools = write_tiny_gguf(
        files / "tools.gguf", seed=6, chat_template=TOOLS_TEMPLATE, n_ctx=1024, reply=f"{WEATHER_CALL}\n{TIME_CALL}"
    )
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


def _bound(svc: ServiceProcess, model: str = "tiny") -> tuple[checks.Post, checks.Events]:
    """``_post`` and ``_events`` naming ``model``, for ``generation_checks``."""

    def post(path: str, status: int = 200, **body: Any) -> Any:
        return _post(svc, path, model, status, **body)

    def events(path: str, **body: Any) -> tuple[list[Any], bool]:
        return _events(svc, path, model, **body)

    return post, events


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
    checks.n_probs_on_completion(*_bound(svc))


def test_logprobs_on_openai_routes(svc: ServiceProcess) -> None:
    """Chat: ``logprobs: true`` and ``top_logprobs: N`` give ``choices[].logprobs.content``, one
    entry per token with its ``N`` likeliest; ``/v1/completions``: ``logprobs: N``."""
    checks.logprobs_on_openai_routes(*_bound(svc))


def test_cache_prompt_reuses_the_prefix_unless_told_not_to(svc: ServiceProcess) -> None:
    """The second request of a shared prefix takes it from its slot's cache (``timings.cache_n``,
    chat ``usage.prompt_tokens_details.cached_tokens``); ``cache_prompt: false`` evaluates it all."""
    checks.cache_prompt_reuses_the_prefix(_bound(svc)[0])


def test_a_seed_gives_the_same_sampled_text_streamed_or_not(svc: ServiceProcess) -> None:
    """At temperature 1.5 the text depends on the seed, and only on it: whole and streamed agree."""
    checks.seed_gives_the_same_text_streamed_or_not(*_bound(svc))


def test_n_and_n_cmpl_give_several_choices(svc: ServiceProcess) -> None:
    """``n`` (OpenAI) and ``n_cmpl`` (native: an array) run side by side on the slots, each child
    with the request's seed; more than the model's slots (2) is a 400."""
    checks.n_and_n_cmpl_give_several_choices(*_bound(svc))


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
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"city": "Rome"}),
    ]
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
