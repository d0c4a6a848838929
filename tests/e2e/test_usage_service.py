"""Usage from the log (issue 34) through the real service and the real client libraries: every dialect's
request is charged the tokens its client saw in its own ``usage`` fields, and ``GET /usage`` sums them,
across a restart too.

One ``modelrouter serve --models-preset`` over tiny real GGUFs: ``chat`` (ChatML), ``bert`` (embeddings)
and ``rank`` (a reranker), with ``AIP_MODE=PREDICTION`` for Vertex AI's ``/predict``. Each request runs
alone and :func:`charged` reads what ``GET /usage`` added for it, so a dialect read wrong names itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_bert, write_tiny_gguf
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(300)
ASK = [{"role": "user", "content": "Say something short"}]
GREEDY: dict[str, Any] = {"temperature": 0, "seed": 1}


@dataclass(frozen=True)
class Tokens:
    prompt: int
    completion: int


def _usage(svc: ServiceProcess, **params: str) -> dict[str, Any]:
    answer = httpx.get(f"{svc.url}/usage", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def charged(svc: ServiceProcess, request: Callable[[], Tokens]) -> tuple[Tokens, Tokens]:
    """(what the client saw, what ``GET /usage`` added) for one request: recorded off the answer's
    path, so waited for, as one more request in the total."""
    before = _usage(svc)["total"]
    seen = request()

    def recorded() -> dict[str, Any] | None:
        total = _usage(svc)["total"]
        return total if total["requests"] == before["requests"] + 1 else None

    after = eventually(recorded, "the request in GET /usage", timeout=30, interval=0.05)
    added = Tokens(
        after["prompt_tokens"] - before["prompt_tokens"], after["completion_tokens"] - before["completion_tokens"]
    )
    return seen, added


def _start(home: Path, models: Path, port: int | None = None, *more: str) -> ServiceProcess:
    preset = models / "models.ini"
    args = ["--models-preset", str(preset), "-np", "1", "-c", "512", *more]
    return ServiceProcess(home, port=port, env={"AIP_MODE": "PREDICTION"}, args=args).start(timeout=60)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("usage-models")
    chat = write_tiny_gguf(root / "chat.gguf", seed=11)
    bert = write_tiny_bert(root / "bert.gguf")
    rank = write_tiny_bert(root / "rank.gguf", pooling="rank")
    (root / "models.ini").write_text(
        f"[chat]\nmodel = {chat}\n\n[bert]\nmodel = {bert}\nembeddings = true\npooling = mean\n\n"
        f"[rank]\nmodel = {rank}\nreranking = true\n"
    )
    return root


@pytest.fixture(scope="module")
def svc(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    proc = _start(tmp_path_factory.mktemp("usage-home"), models)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def oai(svc: ServiceProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _openai_usage(usage: Any) -> Tokens:  # Any: the openai package's CompletionUsage
    assert usage is not None, "the answer stated no usage"
    return Tokens(usage.prompt_tokens, usage.completion_tokens)


def _anthropic_usage(usage: Any) -> Tokens:  # Any: the anthropic package's Usage
    """Anthropic's ``input_tokens`` leaves out what came from the cache; llama-server's prompt has it."""
    return Tokens(usage.input_tokens + (usage.cache_read_input_tokens or 0), usage.output_tokens)


def _post(svc: ServiceProcess, path: str, body: dict[str, Any]) -> Any:
    answer = httpx.post(f"{svc.url}{path}", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_openai_dialects_are_charged_what_the_client_saw(svc: ServiceProcess, oai: openai.OpenAI) -> None:
    def chat() -> Tokens:
        answer = oai.chat.completions.create(model="chat", messages=ASK, max_tokens=5, **GREEDY)
        return _openai_usage(answer.usage)

    def chat_streamed(include_usage: bool) -> Callable[[], Tokens]:
        def run() -> Tokens:
            options = {"include_usage": True} if include_usage else None
            stream = oai.chat.completions.create(
                model="chat",
                messages=ASK,
                max_tokens=5,
                stream=True,
                stream_options=options,
                **GREEDY,
            )
            usages = [chunk.usage for chunk in stream if chunk.usage is not None]
            return _openai_usage(usages[-1]) if include_usage else Tokens(-1, -1)

        return run

    def completion() -> Tokens:
        answer = oai.completions.create(model="chat", prompt="Once upon a time", max_tokens=5, **GREEDY)
        return _openai_usage(answer.usage)

    def embeddings() -> Tokens:
        return Tokens(oai.embeddings.create(model="bert", input=["a cat", "a dog sat"]).usage.prompt_tokens, 0)

    for name, run in (("chat", chat), ("chat stream", chat_streamed(True)), ("completions", completion)):
        seen, added = charged(svc, run)
        assert added == seen, name
    seen, added = charged(svc, embeddings)
    assert added == seen
    # Without include_usage the client sees no usage: llama-server's timings on the last chunk still
    # count, the same as the same greedy chat whole.
    whole, _ = charged(svc, chat)
    _, streamed = charged(svc, chat_streamed(False))
    assert streamed == whole


def test_llama_cpp_rerank_responses_and_predict(svc: ServiceProcess, oai: openai.OpenAI) -> None:
    def native() -> Tokens:
        body = _post(svc, "/completion", {"model": "chat", "prompt": "Hello", "n_predict": 4, **GREEDY})
        return Tokens(body["tokens_evaluated"], body["tokens_predicted"])

    def rerank() -> Tokens:
        body = _post(svc, "/v1/rerank", {"model": "rank", "query": "cat", "documents": ["a cat", "a car"]})
        return Tokens(body["usage"]["prompt_tokens"], 0)

    def responses() -> Tokens:
        answer = oai.responses.create(model="chat", input="Say hi", max_output_tokens=5, temperature=0)
        assert answer.usage is not None
        return Tokens(answer.usage.input_tokens, answer.usage.output_tokens)

    def responses_streamed() -> Tokens:
        stream = oai.responses.create(model="chat", input="Say hi", max_output_tokens=5, temperature=0, stream=True)
        done = [e.response.usage for e in stream if e.type == "response.completed"]
        assert done and done[0] is not None
        return Tokens(done[0].input_tokens, done[0].output_tokens)

    def predict() -> Tokens:
        turn = {"@requestFormat": "chatCompletions", "model": "chat", "messages": ASK, "max_tokens": 4, **GREEDY}
        body = _post(svc, "/predict", {"instances": [turn, turn]})
        usages = [p["usage"] for p in body["predictions"]]
        return Tokens(sum(u["prompt_tokens"] for u in usages), sum(u["completion_tokens"] for u in usages))

    for name, run in (("/completion", native), ("rerank", rerank), ("responses", responses)):
        seen, added = charged(svc, run)
        assert added == seen, name
    seen, added = charged(svc, responses_streamed)
    assert added == seen
    seen, added = charged(svc, predict)
    assert added == seen


def test_anthropic_messages_whole_and_streamed(svc: ServiceProcess) -> None:
    claude = anthropic.Anthropic(base_url=svc.url, api_key="unused", max_retries=0, timeout=120)

    def whole() -> Tokens:
        answer = claude.messages.create(model="chat", max_tokens=5, messages=ASK)
        return _anthropic_usage(answer.usage)

    def streamed() -> Tokens:
        with claude.messages.stream(model="chat", max_tokens=5, messages=ASK) as stream:
            return _anthropic_usage(stream.get_final_message().usage)

    for run in (whole, streamed, whole):  # the second whole one takes its prompt from the cache
        seen, added = charged(svc, run)
        assert added == seen


def test_ollama_is_charged_its_eval_count_and_the_whole_prompt(svc: ServiceProcess, oai: openai.OpenAI) -> None:
    """Ollama's ``eval_count`` is the completion charged. Its ``prompt_eval_count`` leaves out the tokens
    taken from the cache (as Ollama counts), so the prompt charged is the whole one: what the same chat
    through OpenAI's API states, and never less than Ollama's count."""
    client = ollama.Client(host=svc.url, timeout=120)
    options = {"num_predict": 5, "temperature": 0, "seed": 1}

    def same_through_openai() -> Tokens:
        answer = oai.chat.completions.create(model="chat", messages=ASK, max_tokens=5, **GREEDY)
        return _openai_usage(answer.usage)

    whole_prompt = charged(svc, same_through_openai)[0].prompt  # waited for: recorded after its answer

    def chat() -> Tokens:
        answer = client.chat(model="chat", messages=ASK, options=options)
        return Tokens(answer.prompt_eval_count or 0, answer.eval_count or 0)

    def chat_streamed() -> Tokens:
        last = list(client.chat(model="chat", messages=ASK, options=options, stream=True))[-1]
        assert last.done
        return Tokens(last.prompt_eval_count or 0, last.eval_count or 0)

    def generate() -> Tokens:
        answer = client.generate(model="chat", prompt="Say something short", options=options)
        return Tokens(answer.prompt_eval_count or 0, answer.eval_count or 0)

    for name, run in (("chat", chat), ("chat stream", chat_streamed), ("generate", generate)):
        seen, added = charged(svc, run)
        assert added.completion == seen.completion, name
        assert added.prompt == whole_prompt >= seen.prompt, name

    def embed() -> Tokens:
        return Tokens(client.embed(model="bert", input=["a cat", "a dog"]).prompt_eval_count or 0, 0)

    seen, added = charged(svc, embed)
    assert added == seen


def test_usage_by_day_counts_requests_from_before_a_restart(models: Path, tmp_path: Path) -> None:
    """Two requests, a restart on the same data dir, one more: today's row has all three, and the
    per-model rows and the total agree."""
    svc = _start(tmp_path / "home", models)
    try:
        for _ in range(2):
            _post(svc, "/completion", {"model": "chat", "prompt": "Hello", "n_predict": 2})
        eventually(lambda: _usage(svc)["total"]["requests"] == 2, "both recorded", timeout=30, interval=0.05)
        svc.stop()
        svc = _start(svc.home, models, svc.port)
        body = _post(svc, "/completion", {"model": "chat", "prompt": "Hello again", "n_predict": 2})
        eventually(lambda: _usage(svc)["total"]["requests"] == 3, "all three recorded", timeout=30, interval=0.05)
        by_day = _usage(svc, group_by="day", since="24h")
        today = datetime.now(UTC).strftime("%Y-%m-%d")
        assert [(r["group"], r["requests"]) for r in by_day["rows"]] == [(today, 3)]
        assert by_day["rows"][0]["completion_tokens"] >= body["tokens_predicted"]
        (chat,) = _usage(svc, group_by="model")["rows"]
        assert (chat["group"], chat["requests"], chat["errors"]) == ("chat", 3, 0)
        assert chat["p50_ms"] is not None and chat["p95_ms"] >= chat["p50_ms"]
    finally:
        svc.stop()


def test_anonymous_and_full_key_traffic_are_rows_of_their_own(models: Path, tmp_path: Path) -> None:
    """Open mode's requests are ``anonymous``'s; after a restart with ``--api-key`` on the same data
    dir, the key holder's are ``api-key``'s, and the key holder sees both."""
    svc = _start(tmp_path / "home", models)
    try:
        _post(svc, "/completion", {"model": "chat", "prompt": "Hello", "n_predict": 2})
        eventually(lambda: _usage(svc)["total"]["requests"] == 1, "recorded", timeout=30, interval=0.05)
        svc.stop()
        svc = _start(svc.home, models, svc.port, "--api-key", "sk-usage-full")
        auth = {"authorization": "Bearer sk-usage-full"}
        body = {"model": "chat", "prompt": "Hello", "n_predict": 2}
        assert httpx.post(f"{svc.url}/completion", json=body, headers=auth, timeout=120).status_code == 200

        def by_key() -> dict[str, int] | None:
            answer = httpx.get(f"{svc.url}/usage", params={"group_by": "key"}, headers=auth, timeout=30).json()
            rows = {r["group"]: r["requests"] for r in answer["rows"]}
            return rows if answer["total"]["requests"] == 2 else None

        assert eventually(by_key, "both recorded", timeout=30, interval=0.05) == {"anonymous": 1, "api-key": 1}
    finally:
        svc.stop()


def test_named_keys_are_charged_what_their_clients_saw_and_see_only_their_own(models: Path, tmp_path: Path) -> None:
    """Two named keys and a full key through the openai, anthropic and ollama clients: each key's row
    in ``GET /usage`` sums exactly the usage its clients saw; an inference-only key sees only its own
    usage (another key's is a 403 naming the rule); an admin-scoped key and the full key see every key."""
    full = {"authorization": "Bearer sk-usage-full"}
    svc = _start(tmp_path / "home", models, None, "--api-key", "sk-usage-full")
    try:

        def make(name: str, endpoints: list[str]) -> str:
            made = httpx.post(f"{svc.url}/keys", json={"name": name, "endpoints": endpoints}, headers=full, timeout=30)
            assert made.status_code in (200, 201), made.text
            secret: str = made.json()["secret"]
            return secret

        alice, ops = make("alice", ["inference"]), make("ops", ["inference", "admin"])
        seen: dict[str, list[Tokens]] = {"alice": [], "ops": [], "api-key": []}
        for name, secret in (("alice", alice), ("ops", ops), ("api-key", "sk-usage-full")):
            client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=secret, max_retries=0, timeout=120)
            answer = client.chat.completions.create(model="chat", messages=ASK, max_tokens=3, **GREEDY)
            seen[name].append(_openai_usage(answer.usage))
        claude = anthropic.Anthropic(base_url=svc.url, api_key=alice, max_retries=0, timeout=120)
        message = claude.messages.create(model="chat", max_tokens=3, messages=ASK)
        seen["alice"].append(_anthropic_usage(message.usage))
        llama = ollama.Client(host=svc.url, headers={"authorization": f"Bearer {ops}"})
        said = llama.chat(model="chat", messages=ASK, options={"num_predict": 3, **GREEDY})
        rows_ops = _usage_as(svc, ops, group_by="key")
        assert rows_ops is not None
        # Ollama's prompt_eval_count leaves cached tokens out (docs/ollama-compat.md): its completion is exact.
        ollama_completion = said.eval_count or 0

        def by_key() -> dict[str, Any] | None:
            answer = _usage_as(svc, "sk-usage-full", group_by="key")
            return answer if answer["total"]["requests"] == 5 else None

        every = eventually(by_key, "five requests recorded", timeout=30, interval=0.05)
        rows = {row["group"]: row for row in every["rows"]}
        assert set(rows) == {"alice", "ops", "api-key"}
        for name in ("alice", "api-key"):
            assert rows[name]["prompt_tokens"] == sum(t.prompt for t in seen[name]), name
            assert rows[name]["completion_tokens"] == sum(t.completion for t in seen[name]), name
        assert rows["ops"]["completion_tokens"] == seen["ops"][0].completion + ollama_completion
        assert rows["ops"]["requests"] == 2 and rows["alice"]["requests"] == 2

        own = _usage_as(svc, alice, group_by="key")
        assert [row["group"] for row in own["rows"]] == ["alice"] and own["total"]["requests"] == 2
        refused = httpx.get(
            f"{svc.url}/usage", params={"key": "ops"}, headers={"authorization": f"Bearer {alice}"}, timeout=30
        )
        assert refused.status_code == 403 and "ops" not in refused.json().get("rule", "")
        assert {row["group"] for row in _usage_as(svc, ops, group_by="key")["rows"]} == {"alice", "ops", "api-key"}
    finally:
        svc.stop()


def _usage_as(svc: ServiceProcess, secret: str, **params: str) -> dict[str, Any]:
    answer = httpx.get(f"{svc.url}/usage", params=params, headers={"authorization": f"Bearer {secret}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body
