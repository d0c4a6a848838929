"""llama-server's completion details (issue 32, groups 9 and 10), on one tiny GGUF served as
``llama-server -m FILE -c 256 -np 2 --kv-unified --cache-ram 0 -b 32`` would be: one pool of 256 KV
cells that both slots share, idle slots that keep their cells (no RAM cache takes them), prompts
evaluated 32 tokens a step.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("details-pool")
    model = write_tiny_gguf(root / "tiny.gguf", n_ctx=1024)
    args = ["-m", str(model), "-c", "256", "-np", "2", "--kv-unified", "--cache-ram", "0", "-b", "32"]
    with ServiceProcess(root / "home", args=args) as p:
        yield p


def _post(svc: ServiceProcess, path: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{svc.url}{path}", json=body, timeout=120)


def test_an_idle_slots_cells_make_room_in_the_shared_pool(pool: ServiceProcess) -> None:
    """A reply that needs cells an idle slot holds gets them (llama-server's ``try_clear_idle_slots``)
    and runs its whole length, where before it was cut short with ``truncated``."""
    first = _post(pool, "/completion", prompt=[7] * 150, n_predict=50, ignore_eos=True, temperature=0)
    assert first.status_code == 200 and first.json()["tokens_predicted"] == 50
    second = _post(pool, "/completion", prompt=[9] * 20, n_predict=100, ignore_eos=True, temperature=0)
    assert second.status_code == 200, second.text
    body = second.json()
    assert (body["tokens_predicted"], body["truncated"]) == (100, False), "200 cells of 256 were the idle slot's"


def test_a_full_pool_preempts_rather_than_aborting_every_reply(pool: ServiceProcess) -> None:
    """Two replies side by side that together need more than the pool's 256 cells (each fits
    alone): llama-server answers each with a 500 "Context size has been exceeded."; here the younger
    is preempted and resumed (tests/dropin/test_kv_preemption.py), so both run their whole length."""
    both = _post(pool, "/completion", prompt=[5] * 10, n_predict=200, n_cmpl=2, ignore_eos=True, temperature=0)
    assert both.status_code == 200, both.text
    assert [(r["tokens_predicted"], r["truncated"]) for r in both.json()] == [(200, False)] * 2
    again = _post(pool, "/completion", prompt=[5] * 10, n_predict=200, ignore_eos=True, temperature=0)
    assert again.status_code == 200 and again.json()["tokens_predicted"] == 200


def test_response_fields_keeps_only_the_paths_asked_for(pool: ServiceProcess) -> None:
    """``/completion``'s ``response_fields``: the final answer holds just those paths, a nested one
    (``generation_settings/n_predict``) at the root under its path, a missing one left out; streamed,
    the last chunk likewise. Not a list of strings: ignored, as llama-server's ``json_value``."""
    fields = ["content", "generation_settings/n_predict", "prompt", "no/such"]
    whole = _post(pool, "/completion", prompt="once upon", n_predict=8, response_fields=fields)
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert set(body) == {"content", "generation_settings/n_predict", "prompt"}
    assert body["generation_settings/n_predict"] == 8 and isinstance(body["content"], str)
    full = _post(pool, "/completion", prompt="once upon", n_predict=8, response_fields="content").json()
    assert body["prompt"] == full["prompt"] and "generation_settings" in full and "timings" in full
    with httpx.stream(
        "POST",
        f"{pool.url}/completion",
        json={"prompt": "once", "n_predict": 4, "stream": True, "response_fields": fields},
        timeout=120,
    ) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert set(chunks[-1]) == {"content", "generation_settings/n_predict", "prompt"}, chunks[-1]
    assert all(c["stop"] is False for c in chunks[:-1]), "the partial chunks keep their shape"


def test_a_prompt_over_the_context_says_llama_servers_words(pool: ServiceProcess) -> None:
    """Without ``--context-shift`` (the default), a prompt that does not fit its slot's context is
    llama-server's 400 "request (N tokens) exceeds the available context size (C tokens), try
    increasing it", on the native and the OpenAI routes alike."""
    for path, body in (
        ("/completion", {"prompt": [7] * 300, "n_predict": 4}),
        ("/v1/completions", {"prompt": [7] * 300, "max_tokens": 4}),
    ):
        answer = _post(pool, path, **body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        message = "request (300 tokens) exceeds the available context size (256 tokens), try increasing it"
        assert (error["type"], error["message"], error["n_prompt_tokens"], error["n_ctx"]) == (
            "exceed_context_size_error",
            message,
            300,
            256,
        )


def test_post_sampling_probs_are_the_samplers_candidates(pool: ServiceProcess) -> None:
    """``post_sampling_probs`` (what llama-server's backend-sampling test reads): each token's
    ``prob`` and ``top_probs`` (above 0, at most ``n_probs``, likeliest first) are the candidates the
    sampler chain left (top-k 3: three, summing to 1), and the text is the one the same seed gives without it."""
    body = {"prompt": "once upon a time", "n_probs": 10, "n_predict": 6, "seed": 4242, "temperature": 1.0, "top_k": 3}
    post = _post(pool, "/completion", **body, post_sampling_probs=True, backend_sampling=True)
    assert post.status_code == 200, post.text
    answer = post.json()
    assert answer["generation_settings"]["post_sampling_probs"] is True
    entries = answer["completion_probabilities"]
    assert len(entries) == 6
    for entry in entries:
        assert set(entry) == {"id", "token", "bytes", "prob", "top_probs"} and 0.0 < entry["prob"] <= 1.0
        probs = [t["prob"] for t in entry["top_probs"]]
        assert len(probs) == 3 and probs == sorted(probs, reverse=True) and min(probs) > 0.0
        assert sum(probs) == pytest.approx(1.0, abs=1e-4)
        assert entry["prob"] == pytest.approx(next(t["prob"] for t in entry["top_probs"] if t["id"] == entry["id"]))
    plain = _post(pool, "/completion", **body).json()
    assert [e["id"] for e in plain["completion_probabilities"]] == [e["id"] for e in entries]
    assert "top_logprobs" in plain["completion_probabilities"][0] and plain["content"] == answer["content"]
    with httpx.stream(
        "POST", f"{pool.url}/completion", json={**body, "stream": True, "post_sampling_probs": True}, timeout=120
    ) as r:
        parts = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    streamed = [e for p in parts if not p["stop"] for e in p.get("completion_probabilities", [])]
    assert [(e["id"], len(e["top_probs"])) for e in streamed] == [(e["id"], 3) for e in entries]


def test_idle_slots_go_to_the_ram_cache_with_llama_servers_log_lines(tmp_path: Path) -> None:
    """``--cache-ram`` with one KV pool (``test_kv_keep_only_active``): at ``--verbose`` the log says
    llama-server's ``__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__`` at start, ``__TEST_TAG_CACHE_IDLE_SLOT__``
    when a request in another slot saves an idle one to the cache (and clears it), and ``updating
    prompt cache`` when the prompt comes back from it (``cache_n`` > 0)."""
    model = write_tiny_gguf(tmp_path / "tiny.gguf", n_ctx=1024)
    args = ["-m", str(model), "-np", "2", "-c", "512", "--kv-unified", "--cache-ram", "100", "--verbose"]
    long_prompt = "once upon a time in a land far away there lived a brave knight " * 3
    with ServiceProcess(tmp_path / "home", args=args) as svc:
        eventually(lambda: "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" in svc.log_text(), "the start-up line")
        first = _post(svc, "/completion", prompt=long_prompt, id_slot=0, n_predict=4, temperature=0).json()
        assert "__TEST_TAG_CACHE_IDLE_SLOT__" not in svc.log_text(), "slot 1 held nothing to save"
        assert _post(svc, "/completion", prompt="the quick brown fox", id_slot=1, n_predict=4).status_code == 200
        eventually(lambda: "__TEST_TAG_CACHE_IDLE_SLOT__" in svc.log_text(), "slot 0 saved to the cache")
        again = _post(svc, "/completion", prompt=long_prompt, n_predict=4, temperature=0).json()
        eventually(lambda: "updating prompt cache" in svc.log_text(), "the prompt cache looked at")
        assert again["timings"]["cache_n"] > 0 and again["timings"]["prompt_n"] < first["timings"]["prompt_n"]
    quiet = ["-m", str(model), "-np", "2", "--kv-unified", "--cache-ram", "0", "--verbose"]
    with ServiceProcess(tmp_path / "home-quiet", args=quiet) as svc:
        assert _post(svc, "/completion", prompt="hello", n_predict=2).status_code == 200
        assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" not in svc.log_text(), "no RAM cache: not enabled"


RED_PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


def test_an_anthropic_image_without_a_projector_is_a_400_on_purpose(pool: ServiceProcess) -> None:
    """llama-server answers 500 "image input is not supported" (its ``test_compat_anthropic``); the
    same words here, as the 400 of a request the model cannot take (docs/llama-cpp-compat.md, "Where
    modelrouter differs on purpose"), in a user turn and inside a ``tool_result`` alike."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": RED_PIXEL_PNG}}
    tool_use = {"type": "tool_use", "id": "tool_1", "name": "read", "input": {"file": "test.png"}}
    result = {"type": "tool_result", "tool_use_id": "tool_1", "content": [{"type": "text", "text": "File"}, image]}
    for messages in (
        [{"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}],
        [
            {"role": "user", "content": "What is in this image?"},
            {"role": "assistant", "content": [tool_use]},
            {"role": "user", "content": [result]},
        ],
    ):
        answer = _post(pool, "/v1/messages", model="test", max_tokens=10, messages=messages)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["message"].lower().startswith("image input is not supported"), answer.text


def _stream(svc: ServiceProcess, path: str, **body: Any) -> list[Any]:
    """A stream's ``data:`` payloads, parsed (``[DONE]`` left out)."""
    with httpx.stream("POST", f"{svc.url}{path}", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ") and line[6:] != "[DONE]"]


def _progress(parts: list[Any]) -> list[Any]:
    """The ``prompt_progress`` objects of a stream, checked as llama-server's test checks them."""
    seen = [p["prompt_progress"] for p in parts if "prompt_progress" in p]
    assert seen and seen[0]["cache"] == seen[0]["processed"], seen
    for before, after in itertools.pairwise(seen):
        assert (after["total"], after["cache"]) == (before["total"], before["cache"])
        assert after["processed"] > before["processed"], seen
    assert seen[-1]["processed"] == seen[-1]["total"] and all(p["time_ms"] >= 0 for p in seen)
    return seen


def test_return_progress_streams_the_prompts_progress(pool: ServiceProcess) -> None:
    """``return_progress`` (streams): one chunk as the prompt starts (what the cache gave), then one
    per prompt chunk evaluated (``-b 32``: 100 tokens in 4), in each dialect's shape; again, the
    cached prompt leaves one token to evaluate (2 chunks). A whole answer has none."""
    body = {"prompt": [7] * 100, "n_predict": 3, "return_progress": True}
    first = _progress(_stream(pool, "/completion", **body))
    assert [(p["processed"], p["total"], p["cache"]) for p in first] == [
        (0, 100, 0),
        (32, 100, 0),
        (64, 100, 0),
        (96, 100, 0),
        (100, 100, 0),
    ]
    again = _stream(pool, "/completion", **body)
    assert [(p["processed"], p["cache"]) for p in _progress(again)] == [(99, 99), (100, 99)]
    assert all(p["content"] == "" and p["stop"] is False for p in again if "prompt_progress" in p)
    oai = _stream(pool, "/v1/completions", prompt=[8] * 40, max_tokens=2, return_progress=True)
    assert len(_progress(oai)) == 3 and all(p["choices"][0]["text"] == "" for p in oai if "prompt_progress" in p)
    chat = _stream(
        pool,
        "/v1/chat/completions",
        messages=[{"role": "user", "content": "hi " * 40}],
        max_tokens=2,
        return_progress=True,
    )
    assert len(_progress(chat)) >= 2
    assert all(
        p["choices"][0]["delta"] == {"role": "assistant", "content": None} for p in chat if "prompt_progress" in p
    )
    whole = _post(pool, "/completion", prompt=[9] * 50, n_predict=2, return_progress=True).json()
    assert "prompt_progress" not in whole and whole["tokens_predicted"] == 2


def test_the_responses_stream_carries_llama_servers_telemetry(pool: ServiceProcess) -> None:
    """``/v1/responses`` with ``return_progress`` and ``timings_per_token``: ``response.in_progress``
    events with the prompt's progress, text deltas with the timings so far, and the timings on
    ``response.completed`` (llama-server's ``test_responses_stream_with_llama_telemetry``)."""
    # ignore_eos: a sampled first token may be the end, and a reply without text has no delta
    body = {"input": "This is a test" * 10, "max_output_tokens": 8, "temperature": 0.8, "ignore_eos": True}
    events = _stream(pool, "/v1/responses", **body, timings_per_token=True, return_progress=True)
    progress = _progress(events)
    assert len(progress) >= 2 and all(e["type"] == "response.in_progress" for e in events if "prompt_progress" in e)
    # as llama-server: the timings ride on each step's last event (a step may send several), so some
    # text deltas carry them, and every event that carries them has the rates
    timed = [e for e in events if "timings" in e]
    assert all({"prompt_per_second", "predicted_per_second"} <= set(e["timings"]) for e in timed)
    assert any(e["type"] == "response.output_text.delta" for e in timed)
    completed = next(e for e in events if e["type"] == "response.completed")
    assert "usage" in completed["response"] and "timings" in completed
    plain = _stream(pool, "/v1/responses", **body)
    assert not any("prompt_progress" in e or ("timings" in e and e["type"] != "response.completed") for e in plain)
