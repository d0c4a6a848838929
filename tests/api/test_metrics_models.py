"""The per-model series of ``GET /metrics`` (issue 34, llama.cpp #24851) on a real service with real
inference workers, through the real ``openai`` client: each model's requests and tokens equal what the
client's ``usage`` said; a named key adds the ``key`` label; a model gone from the catalogue and a
revoked key drop out; a single-model scrape stays a valid exposition beside the worker's ``llamacpp:*``.

Named keys are created through the log, as ``modelrouter keys add`` records them, by a second writer
(the way a worker or another node writes). The requests a named key makes are appended the same way:
this test is about what ``/metrics`` makes of ``request_completed``, not about who may send it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core import events as ev
from service.core.fold import fold
from service.core.key_commands import ScopeRequest, decide_create, decide_revoke
from service.core.keys import digest_secret
from service.core.state import RouterState
from service.event_store.codec import NewEvent
from service.event_store.sync_store import SyncEventStore
from service.settings import Settings
from tests.api.metrics_scrape import Samples, scrape, value, wait_metric

pytestmark = pytest.mark.timeout(240)
A, B = "tiny-a", "tiny-b"
FULL_KEY = "sk-metrics-models-0123456789"


@pytest.fixture
def models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    write_tiny_gguf(root / f"{A}.gguf", seed=1)
    write_tiny_gguf(root / f"{B}.gguf", seed=2)
    return root


@pytest.fixture
def svc(tmp_path: Path, models: Path) -> Iterator[ServiceProcess]:
    env = {"MODELROUTER_MODELS_DIR": str(models), "MODELROUTER_METRICS": "1"}
    with ServiceProcess(tmp_path / "home", env=env) as proc:
        yield proc


def _append(svc: ServiceProcess, *events: tuple[ev.Event, str | None]) -> None:
    store = SyncEventStore(Settings(home=svc.home).db_path, source={"kind": "test"})
    try:
        store.append([NewEvent(event, model) for event, model in events])
    finally:
        store.close()


def _chat(client: openai.OpenAI, model: str, *, stream: bool = False) -> tuple[int, int]:
    """One chat; the prompt and completion tokens its answer's ``usage`` said."""
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    if not stream:
        answer = client.chat.completions.create(model=model, messages=messages, max_tokens=4)
        assert answer.usage is not None
        return answer.usage.prompt_tokens, answer.usage.completion_tokens
    chunks = client.chat.completions.create(
        model=model, messages=messages, max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    usage = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert usage, "the stream ends with its usage"
    return usage[-1].prompt_tokens, usage[-1].completion_tokens


def _message(svc: ServiceProcess, model: str) -> tuple[int, int]:
    """One Anthropic message: its ``usage``' input (with what came from the cache, which Anthropic's
    ``input_tokens`` leaves out and llama-server's prompt count has) and output tokens."""
    client = anthropic.Anthropic(base_url=svc.url, api_key="none", max_retries=0, timeout=60)
    answer = client.messages.create(model=model, max_tokens=4, messages=[{"role": "user", "content": "hello"}])
    return answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0), answer.usage.output_tokens


def _labels(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for series, labels in samples if series == name and label in dict(labels)}


def test_each_model_counts_what_its_clients_saw_and_a_removed_one_drops_out(svc: ServiceProcess, models: Path) -> None:
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="none", timeout=60)
    seen = {A: [_chat(client, A), _chat(client, A, stream=True), _message(svc, A)], B: [_chat(client, B)]}
    done = wait_metric(
        svc,
        lambda s: (
            value(s, "modelrouter_model_requests_total", model=A, status="2xx") == 3
            and value(s, "modelrouter_model_requests_total", model=B, status="2xx") == 1
        ),
        "both models' requests counted",
    )
    for model, usages in seen.items():
        assert value(done, "modelrouter_prompt_tokens_total", model=model) == sum(p for p, _ in usages) > 0
        assert value(done, "modelrouter_tokens_predicted_total", model=model) == sum(c for _, c in usages) > 0
        assert value(done, "modelrouter_model_request_duration_seconds_count", model=model) == len(usages)
    assert value(done, "modelrouter_requests_processing", model=A) == 0
    assert not _labels(done, "modelrouter_prompt_tokens_total", "key"), "no named key: one series per model"

    (models / f"{B}.gguf").unlink()
    reload = httpx.post(f"{svc.url}/models/reload", timeout=60)
    assert reload.status_code == 200 and B in reload.json()["removed"], reload.text
    gone = wait_metric(svc, lambda s: B not in _labels(s, "modelrouter_prompt_tokens_total", "model"), "b gone")
    assert all(B not in _labels(gone, name, "model") for name, _ in gone), "every series of the removed model"
    assert value(gone, "modelrouter_model_requests_total", model=A, status="2xx") == 3


def test_named_keys_label_each_caller_and_a_revoked_key_drops_out(tmp_path: Path, models: Path) -> None:
    env = {"MODELROUTER_MODELS_DIR": str(models), "MODELROUTER_METRICS": "1"}
    # A full key: a service with named keys wants a key on every request, the scrape's included.
    with ServiceProcess(tmp_path / "home", args=["--api-key", FULL_KEY], env=env) as svc:
        _named_keys_label_each_caller(svc)


def _named_keys_label_each_caller(svc: ServiceProcess) -> None:
    auth = {"Authorization": f"Bearer {FULL_KEY}"}
    before = _chat(openai.OpenAI(base_url=f"{svc.url}/v1", api_key=FULL_KEY, timeout=60), A)
    wait_metric(
        svc, lambda s: value(s, "modelrouter_model_requests_total", model=A, status="2xx") == 1, "counted", headers=auth
    )
    (served_before,) = httpx.get(f"{svc.url}/events", params={"type": "request_completed"}, headers=auth).json()[
        "events"
    ]
    caller = served_before["data"]["key"]  # the full key's name (anonymous where no key middleware names it)
    keys = RouterState()  # the keys as the service's fold will hold them: what decide_* check
    for position, (name, key_id) in enumerate((("alice", "a" * 12), ("bob", "b" * 12))):
        digest = digest_secret("00", f"mr-{key_id}-{name}-secret")
        created = decide_create(keys, name, ScopeRequest(models=(A,)), key_id=key_id, salt="00", digest=digest)
        keys = fold(keys, ev.Recorded(position, f"k{position}", None, created, {}, datetime.now(UTC)))
        _append(svc, (created, None))
    keyed = wait_metric(
        svc, lambda s: bool(_labels(s, "modelrouter_prompt_tokens_total", "key")), "a key label", headers=auth
    )
    # What this service served before any named key existed: its caller's series.
    assert value(keyed, "modelrouter_prompt_tokens_total", model=A, key=caller) == before[0]
    assert value(keyed, "modelrouter_prompt_tokens_total", model=A) == 0, "one label set at a time"

    alice = ev.RequestCompleted(
        instance_id="elsewhere", route="/v1/messages", status_code=200, duration_ms=40.0, key="alice",
        prompt_tokens=12, completion_tokens=5,
    )  # fmt: skip
    bob = ev.RequestCompleted(instance_id="elsewhere", route="/api/chat", status_code=429, duration_ms=1.0, key="bob")
    _append(svc, (alice, A), (alice, A), (bob, A))
    served = wait_metric(
        svc,
        lambda s: value(s, "modelrouter_model_requests_total", model=A, key="bob", status="4xx") == 1,
        "bob",
        headers=auth,
    )
    assert value(served, "modelrouter_prompt_tokens_total", model=A, key="alice") == 24
    assert value(served, "modelrouter_tokens_predicted_total", model=A, key="alice") == 10
    assert value(served, "modelrouter_model_request_duration_seconds_count", model=A, key="alice") == 2

    _append(svc, (decide_revoke(keys, "bob"), None))
    revoked = wait_metric(
        svc, lambda s: "bob" not in _labels(s, "modelrouter_model_requests_total", "key"), "bob out", headers=auth
    )
    assert _labels(revoked, "modelrouter_prompt_tokens_total", "key") == {"alice", caller}
    assert value(revoked, "modelrouter_prompt_tokens_total", model=A, key="alice") == 24


def test_a_single_model_scrape_is_one_valid_exposition(tmp_path: Path, models: Path) -> None:
    """``-m FILE``: the worker's ``llamacpp:*`` families, then the router's, each named once."""
    with ServiceProcess(tmp_path / "single", args=("-m", str(models / f"{A}.gguf"), "--metrics")) as svc:
        client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="none", timeout=60)
        prompt, completion = _chat(client, A)
        samples = wait_metric(
            svc, lambda s: value(s, "modelrouter_tokens_predicted_total", model=A) == completion, "counted"
        )
        assert value(samples, "modelrouter_prompt_tokens_total", model=A) == prompt
        text = httpx.get(f"{svc.url}/metrics", timeout=10).text
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types)), "a family named twice is no valid exposition"
    assert "llamacpp:tokens_predicted_total" in types
    assert "llamacpp:tokens_predicted" in {f.name for f in text_string_to_metric_families(text)}


def test_after_a_restart_the_series_count_from_the_new_start_together(tmp_path: Path, models: Path) -> None:
    """As the router's other event counters (Prometheus takes it as a reset): none counts part of the
    old run from the replayed tail, and the catalogue's models are labelled again as they are served."""
    env = {"MODELROUTER_MODELS_DIR": str(models), "MODELROUTER_METRICS": "1"}
    first = ServiceProcess(tmp_path / "home", env=env).start()
    try:
        client = openai.OpenAI(base_url=f"{first.url}/v1", api_key="none", timeout=60)
        _chat(client, A)
        _chat(client, B)
        wait_metric(first, lambda s: value(s, "modelrouter_tokens_predicted_total", model=B) > 0, "counted")
    finally:
        first.kill9()
    with ServiceProcess(tmp_path / "home", env=env) as again:
        start = scrape(again)
        assert not _labels(start, "modelrouter_prompt_tokens_total", "model")
        assert value(start, "modelrouter_proxied_requests_total", route="/v1/chat/completions", status="200") == 0
        prompt, _ = _chat(openai.OpenAI(base_url=f"{again.url}/v1", api_key="none", timeout=60), A)
        served = wait_metric(
            again, lambda s: value(s, "modelrouter_model_requests_total", model=A, status="2xx") == 1, "counted"
        )
        assert value(served, "modelrouter_prompt_tokens_total", model=A) == prompt
        assert B not in _labels(served, "modelrouter_prompt_tokens_total", "model")
