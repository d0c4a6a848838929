"""Single-model mode (``modelrouter serve -m FILE``, as ``llama-server -m FILE``): the features the
router-mode suites cover (``test_chat_apis``, ``test_llama_endpoints``, ``test_embedding_routes``,
``test_server_behaviour``), with requests that name no model or any model, as a llama-server user
sends them (issue 20: "through the router and in single-model mode").

One service per model kind, started with llama-server's own flags on tiny real GGUFs:

- a chat model with a Hermes-style tool template (``devtools.tiny_gguf.TOOLS_TEMPLATE``) and FIM tokens:
  ``-m tools.gguf --jinja --api-key K --cors-origins O --props --lora L --lora-init-without-apply
  --slot-save-path D --context-shift``, with ``AIP_MODE=PREDICTION`` (Vertex AI's ``/predict``) and
  ``LLAMA_SERVER_DEBUG_FAKE_TIMING=1`` (llama.cpp's test harness sets it for every server it starts);
- a BERT embedding model: ``-m bert.gguf --embedding``;
- a reranker (rank pooling): ``-m rank.gguf --reranking``.

The weights are random: answers are checked for shape, tool calls are forced with ``tool_choice``.
Expectations follow llama.cpp's ``tools/server/server-context.cpp`` and its ``tests/unit/``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import anthropic
import httpx
import openai
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import (
    BOS_ID,
    FIM_TOKENS,
    IM_END_ID,
    N_VOCAB,
    TOOLS_TEMPLATE,
    write_tiny_bert,
    write_tiny_gguf,
    write_tiny_lora,
)
from service.core.server_mode import FAKE_TIMING_WARNING
from service.settings import Settings
from tests.chat_control import assert_control_ends_reasoning, assert_control_refusals
from tests.dropin.conftest import (
    WEATHER,
    assert_every_route_needs_the_key,
    assert_preflight,
    route_table,
    streamed_tool_call,
)

KEY = "sk-single-model-0123456789"
ORIGIN = "http://app.example"
AUTH = {"Authorization": f"Bearer {KEY}"}
CTX = 1024  # -np 1: the one slot holds it all (a prompt with tools is ~500 byte-level tokens)
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
# server_slot_stats::to_json (server-common.cpp), without the speculative draft's members.
TIMINGS = {
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
}
pytestmark = pytest.mark.timeout(180)


def _start(home: Path, *args: str, env: dict[str, str] | None = None) -> ServiceProcess:
    # /health answers 200 once the one model is loaded (llama-server's 503 "Loading model" before).
    return ServiceProcess(home, args=args, env=env).start(timeout=120)


class ChatFiles(NamedTuple):
    model: Path
    lora: Path
    saves: Path
    """--slot-save-path"""


@pytest.fixture(scope="module")
def chat_files(tmp_path_factory: pytest.TempPathFactory) -> ChatFiles:
    root = tmp_path_factory.mktemp("single-chat-files")
    (root / "slots").mkdir()
    # FIM tokens too (appended to the vocabulary, so the adapter's output rows count them): /infill.
    model = write_tiny_gguf(root / "tools.gguf", chat_template=TOOLS_TEMPLATE, n_ctx=CTX, fim=True)
    return ChatFiles(model, write_tiny_lora(root / "lora.gguf", n_vocab=N_VOCAB + len(FIM_TOKENS)), root / "slots")


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, chat_files: ChatFiles) -> Iterator[ServiceProcess]:
    proc = _start(
        tmp_path_factory.mktemp("single-chat"),
        "-m",
        str(chat_files.model),
        "--jinja",
        "--api-key",
        KEY,
        "--cors-origins",
        ORIGIN,
        "--props",
        "--lora",
        str(chat_files.lora),
        "--lora-init-without-apply",
        "--slot-save-path",
        str(chat_files.saves),
        "-c",
        str(CTX),
        "-np",
        "1",
        "--context-shift",
        env={"AIP_MODE": "PREDICTION", "LLAMA_SERVER_DEBUG_FAKE_TIMING": "1"},
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("single-bert")
    proc = _start(root / "home", "-m", str(write_tiny_bert(root / "bert.gguf")), "--embedding")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def rank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("single-rank")
    proc = _start(root / "home", "-m", str(write_tiny_bert(root / "rank.gguf", pooling="rank")), "--reranking")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def oai(svc: ServiceProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{svc.url}/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(svc: ServiceProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=svc.url, api_key=KEY, max_retries=0, timeout=120)  # sends x-api-key


def _post(svc: ServiceProcess, path: str, body: Any, status: int = 200) -> Any:
    """POST without ``model`` (unless ``body`` names one), with the key."""
    answer = httpx.post(f"{svc.url}{path}", json=body, headers=AUTH, timeout=120)
    assert answer.status_code == status, (path, answer.status_code, answer.text)
    return answer.json()


def _get(svc: ServiceProcess, path: str) -> Any:
    answer = httpx.get(f"{svc.url}{path}", headers=AUTH, timeout=60)
    assert answer.status_code == 200, (path, answer.status_code, answer.text)
    return answer.json()


def _events(svc: ServiceProcess, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The data lines of a streamed answer, parsed (``[DONE]`` left out)."""
    with httpx.stream("POST", f"{svc.url}{path}", json={**body, "stream": True}, headers=AUTH, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def _norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


# -- 1. --embedding and --reranking ---------------------------------------------------------


def test_embedding_routes_of_an_embedding_model(bert: ServiceProcess) -> None:
    """``-m bert.gguf --embedding``: ``/embedding`` and ``/embeddings`` answer llama-server's own list
    (one pooled vector per input, normalised unless ``embd_normalize`` -1), ``/v1/embeddings`` OpenAI's
    shape through the openai client under any model name; ``/rerank`` is llama-server's 501."""
    native = httpx.post(f"{bert.url}/embedding", json={"content": "hello"}, timeout=60).json()
    assert isinstance(native, list) and native[0]["index"] == 0 and len(native[0]["embedding"]) == 1
    unit = native[0]["embedding"][0]
    assert len(unit) == 64 and abs(_norm(unit) - 1) < 1e-3
    answer = httpx.post(f"{bert.url}/embeddings", json={"input": "hello", "embd_normalize": -1}, timeout=60)
    raw = answer.json()[0]["embedding"][0]
    assert abs(_norm(raw) - 1) > 0.01
    assert max(abs(r / _norm(raw) - u) for r, u in zip(raw, unit, strict=True)) < 1e-3, "the same vector, raw"

    client = openai.OpenAI(base_url=f"{bert.url}/v1", api_key="unused", max_retries=0)
    result = client.embeddings.create(model="text-embedding-3-small", input=["a cat", "a dog", "hello"])
    assert result.object == "list" and [d.index for d in result.data] == [0, 1, 2]
    # llama-server echoes the request's model here, its own name when none is given (server-common.cpp).
    assert result.model == "text-embedding-3-small"
    assert max(abs(x - y) for x, y in zip(result.data[2].embedding, unit, strict=True)) < 1e-3, "the same vector"
    tokens = httpx.post(f"{bert.url}/tokenize", json={"content": "hello", "add_special": True}, timeout=60).json()
    nameless = httpx.post(f"{bert.url}/v1/embeddings", json={"input": "hello"}, timeout=60).json()
    assert nameless["usage"] == {"prompt_tokens": len(tokens["tokens"]), "total_tokens": len(tokens["tokens"])}
    assert nameless["data"][0]["object"] == "embedding" and nameless["model"] == "bert"

    refused = httpx.post(f"{bert.url}/rerank", json={"query": "q", "documents": ["d"]}, timeout=60)
    assert refused.status_code == 501 and refused.json()["error"] == {
        "code": 501,
        "message": "This server does not support reranking. Start it with `--reranking`",
        "type": "not_supported_error",
    }


def test_rerank_routes_of_a_reranker(rank: ServiceProcess) -> None:
    """``-m rank.gguf --reranking``: each of llama-server's four rerank routes answers Jina's shape,
    best first, ``top_n`` cutting it; TEI's ``texts`` gives the bare list; no ``query`` is a 400."""
    docs = ["a cat sat", "hello", "zzz", "what is a cat"]
    answers = {}
    for path in ("/rerank", "/v1/rerank", "/reranking", "/v1/reranking"):
        answer = httpx.post(f"{rank.url}{path}", json={"query": "a cat", "documents": docs}, timeout=60)
        assert answer.status_code == 200, (path, answer.text)
        body = answers[path] = answer.json()
        assert sorted(r["index"] for r in body["results"]) == [0, 1, 2, 3], path
        scores = [r["relevance_score"] for r in body["results"]]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4, path
    assert all(a["results"] == answers["/rerank"]["results"] for a in answers.values())
    top = httpx.post(
        f"{rank.url}/v1/rerank",
        json={"model": "jina-reranker", "query": "a cat", "documents": docs, "top_n": 2},
        timeout=60,
    ).json()
    assert top["results"] == answers["/rerank"]["results"][:2]
    assert top["model"] == "jina-reranker" and answers["/rerank"]["model"] == "rank", "echoed, else its own"
    tei = httpx.post(f"{rank.url}/rerank", json={"query": "a cat", "texts": docs, "return_text": True}, timeout=60)
    assert [(r["index"], r["text"]) for r in tei.json()] == [
        (r["index"], docs[r["index"]]) for r in answers["/rerank"]["results"]
    ]
    assert httpx.post(f"{rank.url}/rerank", json={"documents": ["x"]}, timeout=60).status_code == 400


# -- 2. Anthropic's Messages and OpenAI's Responses -------------------------------------------


def test_anthropic_messages_plain_streamed_and_counted(svc: ServiceProcess, claude: anthropic.Anthropic) -> None:
    """Any model name an Anthropic client sends reaches the one model; ``count_tokens`` counts what
    ``/v1/messages`` evaluated; the stream's events rebuild the message; a body naming no model too."""
    message = claude.messages.create(
        model="claude-3-5-haiku-latest",
        max_tokens=5,
        system="be brief",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        extra_body={"temperature": 0},
    )  # greedy: a sampled first token may end it
    assert message.type == "message" and message.role == "assistant" and message.content[0].type == "text"
    assert message.stop_reason in ("max_tokens", "end_turn") and message.model == "tools", "the served model's name"
    counted = claude.messages.count_tokens(
        model="claude-any", system="be brief", messages=[{"role": "user", "content": "hi"}]
    )
    assert counted.input_tokens == message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 0
    nameless = _post(
        svc, "/v1/messages/count_tokens", {"system": "be brief", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert nameless["input_tokens"] == counted.input_tokens

    with claude.messages.stream(
        model="claude-any", max_tokens=6, messages=[{"role": "user", "content": "hi"}], extra_body={"temperature": 0}
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert text and final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6
    # Greedy, as the stream above: a sampled first token may end the turn (0 output tokens, a valid answer).
    plain = _post(
        svc, "/v1/messages", {"max_tokens": 2, "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert plain["type"] == "message" and plain["usage"]["output_tokens"] > 0
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=svc.url, api_key="nope", max_retries=0).messages.create(
            model="claude-any", max_tokens=2, messages=[{"role": "user", "content": "hi"}]
        )


def test_anthropic_tool_use_and_its_result(claude: anthropic.Anthropic) -> None:
    """``tool_choice: any`` gives one ``tool_use`` block (stop reason ``tool_use``); sent back with its
    ``tool_result``, the conversation renders through the template and counts more tokens."""
    tool: Any = {"name": "get_weather", "description": "the weather", "input_schema": WEATHER["function"]["parameters"]}
    message = claude.messages.create(
        model="claude-any",
        max_tokens=200,
        tools=[tool],
        tool_choice={"type": "any"},
        messages=ASK,
        extra_body={"temperature": 0},
    )
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather"
    assert uses[0].input["city"] in ("Paris", "Rome")  # type: ignore[index]
    asked = claude.messages.count_tokens(model="claude-any", tools=[tool], messages=ASK)
    answered = claude.messages.count_tokens(
        model="claude-any",
        tools=[tool],
        messages=[
            *ASK,
            {"role": "assistant", "content": [u.model_dump() for u in uses]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]},
        ],
    )
    assert answered.input_tokens > asked.input_tokens > 0


def test_responses_api_and_input_tokens(svc: ServiceProcess, oai: openai.OpenAI) -> None:
    """OpenAI's Responses API under any model name, plain and streamed with a required function call;
    the four ``input_tokens`` routes (with and without ``/v1``, naming no model) count the chat's prompt
    exactly as ``/apply-template`` renders it and ``/tokenize`` counts it."""
    response = oai.responses.create(model="gpt-4o", input="hi", instructions="be brief", max_output_tokens=5)
    assert response.object == "response" and response.status == "completed" and response.output[0].type == "message"
    assert response.model == "tools"
    assert response.usage is not None and response.usage.input_tokens > 0 and 0 < response.usage.output_tokens <= 5
    tool: Any = {"type": "function", **WEATHER["function"]}
    with oai.responses.stream(
        model="gpt-4o", input=ASK, tools=[tool], tool_choice="required", max_output_tokens=200, temperature=0
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments)["city"] in ("Paris", "Rome")

    prompt = _post(svc, "/apply-template", {"messages": ASK, "tools": [WEATHER]})["prompt"]
    tokens = _post(svc, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
    for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):
        assert _post(svc, path, {"messages": ASK, "tools": [WEATHER]})["input_tokens"] == len(tokens), path
    chat = _post(svc, "/v1/chat/completions", {"messages": ASK, "tools": [WEATHER], "max_tokens": 2})
    assert chat["usage"]["prompt_tokens"] == len(tokens)
    direct = _post(svc, "/v1/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "hi"}]})
    for path in ("/v1/responses/input_tokens", "/responses/input_tokens"):
        assert _post(svc, path, {"input": "hi"})["input_tokens"] == direct["input_tokens"] > 0, path


# -- 3. tools and reasoning (--jinja, the GGUF's template) -----------------------------------------


def test_tool_choice_required_and_named_streamed(oai: openai.OpenAI) -> None:
    """``tool_choice: required`` gives a call (finish ``tool_calls``); a named function streamed: the
    first delta carries index, id and name, the arguments arrive in pieces that join to the whole call."""
    tools: Any = [WEATHER]
    answer = oai.chat.completions.create(
        model="gpt-3.5-turbo", messages=ASK, tools=tools, tool_choice="required", max_tokens=200, temperature=0
    )
    choice = answer.choices[0]
    calls = choice.message.tool_calls or []
    assert choice.finish_reason == "tool_calls" and len(calls) == 1 and calls[0].id
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments)["city"] in ("Paris", "Rome")

    kwargs: dict[str, Any] = {
        "model": "gpt-3.5-turbo",
        "messages": ASK,
        "tools": [WEATHER],
        "max_tokens": 200,
        "temperature": 0,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }
    whole = oai.chat.completions.create(**kwargs).choices[0].message.tool_calls or []
    ids, names, args, finish, pieces = streamed_tool_call(oai.chat.completions.create(**kwargs, stream=True))
    assert finish == "tool_calls" and len(ids) == 1 and names == ["get_weather"] and pieces > 1
    assert json.loads(args) == json.loads(whole[0].function.arguments)


def test_reasoning_content_and_reasoning_format(oai: openai.OpenAI) -> None:
    """A prompt that opened ``<think>`` starts the answer inside the reasoning (``reasoning_content``);
    ``reasoning_format: none`` keeps it in ``content``."""
    kwargs: dict[str, Any] = {"model": "any", "messages": ASK, "max_tokens": 6, "temperature": 0}
    thinking = oai.chat.completions.create(**kwargs, extra_body={"chat_template_kwargs": {"thinking": True}})
    message = thinking.choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning_content")
    assert reasoning and not (message.content or "").startswith(reasoning)
    plain = oai.chat.completions.create(
        **kwargs, extra_body={"chat_template_kwargs": {"thinking": True}, "reasoning_format": "none"}
    )
    assert plain.choices[0].message.content and not (plain.choices[0].message.model_extra or {}).get(
        "reasoning_content"
    )


# -- 4. /tokenize and /detokenize ----------------------------------------------------------------


def test_tokenize_with_pieces_and_add_special(svc: ServiceProcess) -> None:
    plain = _post(svc, "/tokenize", {"content": "hi"})
    assert set(plain) == {"tokens"} and BOS_ID not in plain["tokens"], "add_special defaults to false"
    assert _post(svc, "/tokenize", {"content": "hi", "add_special": True})["tokens"] == [BOS_ID, *plain["tokens"]]
    assert _post(svc, "/detokenize", {"tokens": plain["tokens"]})["content"].strip() == "hi"
    pieces = _post(svc, "/tokenize", {"content": "hi", "with_pieces": True})["tokens"]
    assert all(set(p) == {"id", "piece"} for p in pieces) and [p["id"] for p in pieces] == plain["tokens"]
    assert "".join(p["piece"] for p in pieces) == _post(svc, "/detokenize", {"tokens": plain["tokens"]})["content"]
    halves = [p["piece"] for p in _post(svc, "/tokenize", {"content": "é", "with_pieces": True})["tokens"]]
    assert bytes(b for piece in halves if isinstance(piece, list) for b in piece) == "é".encode()
    assert "token ids" in _post(svc, "/detokenize", {"tokens": [10**6]}, 400)["error"]["message"]


# -- 5. timings -------------------------------------------------------------------------------------


def test_timings_on_completion_and_chat_streamed_or_not(svc: ServiceProcess) -> None:
    """``timings`` (llama-server's slot statistics) on the whole answer and on the last streamed chunk
    of ``/completion`` and ``/v1/chat/completions``, counting what was generated; every streamed chat
    delta but the last carries ``content``, as llama-server sends it."""
    body = {"prompt": "once upon", "n_predict": 5, "temperature": 0}
    whole = _post(svc, "/completion", body)
    assert set(whole["timings"]) >= TIMINGS and whole["timings"]["predicted_n"] == whole["tokens_predicted"] > 0
    assert whole["timings"]["prompt_n"] + whole["timings"]["cache_n"] == whole["tokens_evaluated"]
    *partial, last = _events(svc, "/completion", body)
    assert all("timings" not in c or c["stop"] is False for c in partial) and last["stop"] is True
    assert set(last["timings"]) >= TIMINGS and last["timings"]["predicted_n"] == whole["tokens_predicted"]
    assert "".join(c["content"] for c in partial) == whole["content"]

    chat = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0}
    answer = _post(svc, "/v1/chat/completions", chat)
    assert set(answer["timings"]) >= TIMINGS
    assert answer["timings"]["predicted_n"] == answer["usage"]["completion_tokens"] > 0
    chunks = _events(svc, "/v1/chat/completions", chat)
    assert set(chunks[-1]["timings"]) >= TIMINGS
    assert chunks[-1]["timings"]["predicted_n"] == answer["usage"]["completion_tokens"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None]
    assert deltas and all("content" in d for d in deltas), deltas
    assert "".join(d["content"] or "" for d in deltas) == answer["choices"][0]["message"]["content"]


# -- 6. --api-key and CORS on every route ---------------------------------------------------------


def test_api_key_and_cors_on_every_route(svc: ServiceProcess, chat_files: ChatFiles) -> None:
    """The router-mode sweep over single-model mode's own route table: every route but /health and the
    dashboard's files is llama-server's 401 without the key, with the CORS header; with the key (as
    ``Authorization`` or ``X-Api-Key``) it is served; a preflight needs no key. An unknown path is
    checked as llama-server checks it, before routing."""
    table = route_table(Settings(home=svc.home, api_keys=(KEY,), model_file=chat_files.model))
    assert ("POST", "/v1/messages") in table and ("GET", "/slots") in table and len(table) > 40
    assert_every_route_needs_the_key(svc, table, ORIGIN)
    listed = httpx.get(f"{svc.url}/v1/models", headers={"X-Api-Key": KEY}, timeout=30)
    assert [m["id"] for m in listed.json()["data"]] == ["tools"]
    assert listed.headers["access-control-allow-origin"] == ORIGIN
    assert_preflight(svc.url, "/completion", ORIGIN)
    # llama-server checks both before routing (its pre-routing handler): an unknown path too.
    unknown = httpx.post(f"{svc.url}/no/such/route", headers={"Origin": ORIGIN}, timeout=30)
    assert unknown.status_code == 401 and unknown.headers["access-control-allow-origin"] == ORIGIN
    missing = httpx.post(f"{svc.url}/no/such/route", headers={"Origin": ORIGIN, **AUTH}, timeout=30)
    assert missing.status_code == 404 and missing.headers["access-control-allow-origin"] == ORIGIN
    anywhere = httpx.options(f"{svc.url}/no/such/route", headers={"Origin": ORIGIN}, timeout=30)
    assert (
        anywhere.status_code == 200 and anywhere.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    )


# -- 7. /lora-adapters, /predict, POST /props, logit_bias pairs and ignore_eos ---------------------


def test_lora_adapters_without_a_model(svc: ServiceProcess, chat_files: ChatFiles) -> None:
    """``--lora L --lora-init-without-apply``: ``GET /lora-adapters`` lists L at scale 0 (llama-server's
    shape); a ``POST`` naming no model sets the scale and changes the greedy text, ``[]`` restores it."""
    assert _get(svc, "/lora-adapters") == [
        {"id": 0, "path": str(chat_files.lora), "scale": 0.0, "task_name": "", "prompt_prefix": ""}
    ]
    body = {"prompt": "hello there", "n_predict": 8, "temperature": 0}
    base = _post(svc, "/completion", body)["content"]
    try:
        assert _post(svc, "/lora-adapters", [{"id": 0, "scale": 1}]) == {"success": True}
        assert _get(svc, "/lora-adapters")[0]["scale"] == 1.0
        assert _post(svc, "/completion", body)["content"] != base
    finally:
        assert _post(svc, "/lora-adapters", []) == {"success": True}
    assert _post(svc, "/completion", body)["content"] == base


def test_predict_props_and_wide_completion_bodies(svc: ServiceProcess) -> None:
    """Vertex AI's ``/predict`` with instances that name no model (as llama.cpp's test_compat_gcp sends
    them); ``POST /props`` with ``--props``; ``logit_bias`` as ``[token, bias]`` / ``[text, false]``
    pairs and ``ignore_eos``."""
    chat = {"@requestFormat": "chatCompletions", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    instances = [chat, {"@requestFormat": "tokenize", "content": "hi"}, {"max_tokens": 2}, "not an object"]
    first, tokens, unnamed, bad = _post(svc, "/predict", {"instances": instances})["predictions"]
    assert first["object"] == "chat.completion" and first["choices"][0]["message"]["role"] == "assistant"
    assert tokens["tokens"] == _post(svc, "/tokenize", {"content": "hi"})["tokens"]
    # llama-server answers each instance: one that is no request is its own error, the others run.
    assert "@requestFormat" in unnamed["error"]["message"] and "JSON object" in bad["error"]["message"]
    assert _post(svc, "/props", {"anything": 1}) == {"success": True}
    # Issue 29 §5: no instances is llama-server's empty answer (it was a 500), not an array its 400.
    assert _post(svc, "/predict", {"instances": []}) == {"predictions": []}
    refused = _post(svc, "/predict", {"instances": {"@requestFormat": "tokenize"}}, 400)["error"]
    assert refused["message"] == "request body must include an array field named instances"

    base = {"n_predict": 3, "temperature": 0}
    forced = _post(
        svc, "/completion", {**base, "prompt": {"prompt_string": "once"}, "logit_bias": [[71, 100], ["B", False]]}
    )
    assert forced["content"] == "AAA"
    banned = _post(svc, "/completion", {**base, "prompt": "once", "logit_bias": [[71, 100], ["A", False]]})
    assert "A" not in banned["content"]
    eos = {**base, "prompt": "once", "logit_bias": [[IM_END_ID, 100]]}
    assert _post(svc, "/completion", eos)["stop_type"] == "eos"
    ignored = _post(svc, "/completion", {**eos, "ignore_eos": True})
    assert ignored["stop_type"] == "limit" and ignored["tokens_predicted"] == 3, "the EOS never ends it"


# -- 8. /slots and /props without ?model= -----------------------------------------------------------


def test_slots_and_props_without_a_model(svc: ServiceProcess, chat_files: ChatFiles) -> None:
    """``GET /slots`` and ``GET /props`` naming no model answer the one model's (llama-server's shapes):
    ``-np 1`` is one slot with the whole context, and the slot shows the last request's parameters."""
    _post(svc, "/completion", {"prompt": "slots", "n_predict": 2, "temperature": 0})
    props = _get(svc, "/props")
    assert props["model_path"] == str(chat_files.model) and props["total_slots"] == 1
    assert props["endpoint_slots"] is True and props["endpoint_props"] is True and props["is_sleeping"] is False
    assert props["default_generation_settings"]["n_ctx"] == CTX
    slots = _get(svc, "/slots")
    assert isinstance(slots, list) and [s["id"] for s in slots] == [0]
    assert slots[0]["n_ctx"] == CTX and slots[0]["is_processing"] is False
    assert slots[0]["params"]["n_predict"] == 2, "an idle slot shows its last request's parameters"
    assert slots[0]["next_token"][0]["n_decoded"] == 0, "and none of its counts (llama-server's reset)"
    assert _get(svc, "/slots?model=whatever") == _get(svc, "/slots"), "?model= is ignored, as llama-server"


def test_slot_save_erase_restore_without_a_model(svc: ServiceProcess, chat_files: ChatFiles) -> None:
    """``--slot-save-path D``: ``POST /slots/0?action=save|erase|restore`` naming no model act on the one
    model's slot (llama-server's answers); the restored cache serves the same prompt again."""
    prompt = {"prompt": "a long enough prompt to be worth keeping", "n_predict": 2, "temperature": 0}
    first = _post(svc, "/completion", prompt)
    slot, cached = first["id_slot"], first["tokens_cached"]
    saved = _post(svc, f"/slots/{slot}?action=save", {"filename": "one.bin"})
    assert saved["id_slot"] == slot and saved["n_saved"] == cached and saved["n_written"] > 0
    assert (chat_files.saves / "one.bin").stat().st_size == saved["n_written"]
    assert _post(svc, f"/slots/{slot}?action=erase", {}) == {"id_slot": slot, "n_erased": cached}
    restored = _post(svc, f"/slots/{slot}?action=restore", {"filename": "one.bin"})
    assert restored["n_restored"] == cached and restored["n_read"] == saved["n_written"]
    again = _post(svc, "/completion", prompt)
    assert again["timings"]["cache_n"] == first["tokens_evaluated"] - 1 and again["content"] == first["content"]
    assert "Invalid filename" in _post(svc, f"/slots/{slot}?action=save", {"filename": "../x"}, 400)["error"]["message"]


def test_infill_without_a_model(svc: ServiceProcess) -> None:
    """A llama with FIM tokens: ``/infill`` naming no model evaluates ``[BOS] FIM_PRE prefix FIM_SUF
    suffix FIM_MID`` and answers the native ``/completion`` shape; llama-server's 400s for bad bodies."""
    body = {"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 3, "temperature": 0}
    n_prefix, n_suffix = (
        len(_post(svc, "/tokenize", {"content": text, "parse_special": False})["tokens"]) for text in ("def f(", "):\n")
    )
    whole = _post(svc, "/infill", body)
    assert whole["stop"] is True and whole["tokens_evaluated"] == 4 + n_prefix + n_suffix
    assert 0 < whole["tokens_predicted"] <= 3 and set(whole["timings"]) >= TIMINGS
    assert _post(svc, "/infill", {**body, "prompt": "x = "})["tokens_evaluated"] > whole["tokens_evaluated"]
    missing = _post(svc, "/infill", {"input_prefix": "a"}, 400)["error"]["message"]
    assert '"input_suffix" is required' in missing


# -- 9. the chat control, and a debug switch that is the router's --------------------------------------


def test_chat_control_ends_the_reasoning_of_a_running_chat(svc: ServiceProcess) -> None:
    """``POST /v1/chat/completions/control`` naming no model (or any model) reaches the one model: a
    chat armed with ``reasoning_control`` ends its reasoning there, and the refusals are llama-server's."""
    assert_control_ends_reasoning(svc.url, {}, {}, AUTH)
    assert_control_refusals(svc.url, {}, {"model": "gpt-4o"}, AUTH)


def test_fake_timing_is_the_routers_only(svc: ServiceProcess) -> None:
    """``LLAMA_SERVER_DEBUG_FAKE_TIMING=1`` is set for this service, but llama-server reads it in router
    mode only: no load waited and no request is held (the router says so on ``/health`` when they are:
    ``tests/e2e/test_router_rules.py``), and requests are answered."""
    health = _get(svc, "/health")
    assert health["status"] == "ok" and FAKE_TIMING_WARNING not in health["warnings"]
    assert _post(svc, "/completion", {"prompt": "hi", "n_predict": 1})["tokens_predicted"] <= 1
