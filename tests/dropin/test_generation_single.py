"""llama-server's generation behaviour in single-model mode (issue 20 §4, §5, §7): the checks of
``test_generation_router.py`` with ``modelrouter serve -m FILE`` and requests that name no model,
as a ``llama-server -m FILE`` user sends them.

Two services on one tiny GGUF, started with llama-server's command lines:

* ``shift``: ``-c 512 -np 2 --context-shift`` (each slot 256 cells, as llama-server shares ``-c``);
* ``unified``: ``-c 512 -np 2 --kv-unified`` without ``--context-shift`` (each slot may fill all
  512, and a full context ends the reply).

And ``--embedding --pooling P`` on a BERT file, pooled rows compared with ``--pooling none``'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_bert, write_tiny_gguf
from tests.dropin import generation_checks as checks
from tests.dropin.conftest import close_vectors, unit_vector
from tests.service_probes import events

pytestmark = pytest.mark.timeout(180)


def _serve(root: Path, *args: str) -> Iterator[ServiceProcess]:
    with ServiceProcess(root / "home", args=["-m", str(write_tiny_gguf(root / "tiny.gguf", n_ctx=1024)), *args]) as p:
        yield p


@pytest.fixture(scope="module")
def shift(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    yield from _serve(tmp_path_factory.mktemp("single-shift"), "-c", "512", "-np", "2", "--context-shift")


@pytest.fixture(scope="module")
def unified(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    yield from _serve(tmp_path_factory.mktemp("single-unified"), "-c", "512", "-np", "2", "--kv-unified")


def _post(svc: ServiceProcess, path: str, status: int = 200, **body: Any) -> Any:
    """POST naming no model."""
    answer = httpx.post(f"{svc.url}{path}", json=body, timeout=120)
    assert answer.status_code == status, (path, answer.text)
    return answer.json()


def _events(svc: ServiceProcess, path: str, **body: Any) -> tuple[list[Any], bool]:
    """A stream's ``data:`` payloads (parsed) and whether it ended with ``data: [DONE]``."""
    with httpx.stream("POST", f"{svc.url}{path}", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    done = bool(lines) and lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines if line != "[DONE]"], done


def _bound(svc: ServiceProcess) -> tuple[checks.Post, checks.Events]:
    """``_post`` and ``_events`` of one service, for ``generation_checks``."""
    return partial(_post, svc), partial(_events, svc)


def test_a_prompt_over_the_context_is_llama_servers_error(shift: ServiceProcess, unified: ServiceProcess) -> None:
    """400 ``exceed_context_size_error`` naming the prompt's size and the slot's context, with or
    without ``--context-shift`` (llama-server never shifts a prompt)."""
    for path, body in (
        ("/v1/completions", {"prompt": [7] * 300, "max_tokens": 1}),
        ("/completion", {"prompt": [7] * 300, "n_predict": 1}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 600}], "max_tokens": 1}),
    ):
        error = _post(shift, path, status=400, **body)["error"]
        assert error["type"] == "exceed_context_size_error" and error["code"] == 400, (path, error)
        assert error["n_ctx"] == 256 and error["n_prompt_tokens"] > 256 and error["message"]
    assert _post(shift, "/v1/completions", status=400, prompt=[7] * 300)["error"]["n_prompt_tokens"] == 300
    error = _post(unified, "/completion", status=400, prompt=[7] * 600, n_predict=1)["error"]
    assert (error["type"], error["n_ctx"], error["n_prompt_tokens"]) == ("exceed_context_size_error", 512, 600)
    assert _post(shift, "/v1/completions", prompt=[7] * 240, max_tokens=2)["usage"]["prompt_tokens"] == 240


def test_context_shift_goes_on_and_without_it_the_context_end_stops(
    shift: ServiceProcess, unified: ServiceProcess
) -> None:
    """Without ``--context-shift`` a full slot ends the reply (``limit``, ``truncated``; OpenAI's
    ``length``); with it the oldest tokens after ``n_keep`` make room and the reply runs its length."""
    body = {"n_predict": 120, "temperature": 0, "ignore_eos": True}
    stopped = _post(unified, "/completion", prompt=[7] * 450, **body)
    assert stopped["stop_type"] == "limit" and stopped["truncated"] is True
    assert 0 < stopped["tokens_predicted"] <= 512 - 450, "the slot holds 512: 450 prompt tokens leave 62"
    oai = _post(unified, "/v1/completions", prompt=[7] * 450, max_tokens=120, temperature=0, ignore_eos=True)
    assert oai["choices"][0]["finish_reason"] == "length" and oai["usage"]["completion_tokens"] <= 512 - 450
    shifted = _post(shift, "/completion", prompt=[7] * 200, **body, n_keep=16)
    assert shifted["tokens_predicted"] == 120 and shifted["truncated"] is True and shifted["stop_type"] == "limit"
    whole = _post(unified, "/completion", prompt=[7] * 200, **body)
    assert whole["tokens_predicted"] == 120 and whole["truncated"] is False, "512 cells hold it unshifted"
    assert shifted["content"][:20] == whole["content"][:20], "the same text before the shift"
    assert _post(shift, "/completion", status=400, prompt=[7] * 200, **body, n_keep=-5)["error"]["message"]
    short = _post(shift, "/completion", prompt=[7] * 20, n_predict=4, temperature=0)
    assert short["truncated"] is False, "a reply that fits is not truncated"


def test_n_probs_on_completion(shift: ServiceProcess) -> None:
    """llama-server's ``completion_probabilities``: per token its id, text, bytes, logprob and the
    ``n_probs`` likeliest; streamed, each partial carries its own token's."""
    checks.n_probs_on_completion(*_bound(shift))


def test_logprobs_on_openai_routes(shift: ServiceProcess) -> None:
    """Chat: ``logprobs: true`` and ``top_logprobs: N`` give ``choices[].logprobs.content``, one
    entry per token with its ``N`` likeliest; ``/v1/completions``: ``logprobs: N``."""
    checks.logprobs_on_openai_routes(*_bound(shift))


def test_logprob_tokens_join_to_the_reply_as_llama_servers(shift: ServiceProcess) -> None:
    """A character split over byte tokens: the entries' ``token`` texts joined are the reply."""
    checks.logprob_tokens_join_to_the_text(*_bound(shift))


def test_cache_prompt_reuses_the_prefix_unless_told_not_to(shift: ServiceProcess) -> None:
    """The second request of a shared prefix takes it from its slot's cache (``timings.cache_n``,
    chat ``usage.prompt_tokens_details.cached_tokens``); ``cache_prompt: false`` evaluates it all."""
    checks.cache_prompt_reuses_the_prefix(_bound(shift)[0])


def test_a_seed_gives_the_same_sampled_text_streamed_or_not(shift: ServiceProcess) -> None:
    """At temperature 1.5 the text depends on the seed, and only on it: whole and streamed agree."""
    checks.seed_gives_the_same_text_streamed_or_not(*_bound(shift))


def test_n_and_n_cmpl_give_several_choices(shift: ServiceProcess) -> None:
    """``n`` (OpenAI) and ``n_cmpl`` (native: an array) run side by side on the slots, each child
    with the request's seed; more than the model's slots (2) is a 400."""
    checks.n_and_n_cmpl_give_several_choices(*_bound(shift))


def test_each_slot_gets_its_share_unless_kv_unified(shift: ServiceProcess, unified: ServiceProcess) -> None:
    """``-c 512 -np 2``: each slot 256 cells; with ``--kv-unified`` each may fill all 512 — in
    ``/props`` and ``/slots`` without ``?model=``, and in what a prompt may hold."""
    for svc, per_slot in ((shift, 256), (unified, 512)):
        props = httpx.get(f"{svc.url}/props", timeout=60)
        assert props.status_code == 200, props.text
        assert props.json()["default_generation_settings"]["n_ctx"] == per_slot
        slots = httpx.get(f"{svc.url}/slots", timeout=30).json()
        assert len(slots) == 2 and {s["n_ctx"] for s in slots} == {per_slot}, slots
    assert _post(unified, "/v1/completions", prompt=[7] * 300, max_tokens=2)["usage"]["prompt_tokens"] == 300
    assert _post(shift, "/v1/completions", status=400, prompt=[7] * 300, max_tokens=2)["error"]["n_ctx"] == 256


def test_pooling_flags_pool_the_per_token_vectors(tmp_path: Path) -> None:
    """``-m bert.gguf --embedding --pooling P``: ``cls`` is ``none``'s first per-token row, ``last``
    its last (raw with ``embd_normalize: -1``, L2-normalised by default), as with ``--models-dir``
    (``test_admin_router.py``); requests name no model."""
    bert = write_tiny_bert(tmp_path / "bert.gguf")
    rows: dict[str, Any] = {}
    for pooling in ("none", "cls", "last"):
        with ServiceProcess(
            tmp_path / f"home-{pooling}", args=["-m", str(bert), "--embedding", "--pooling", pooling]
        ) as svc:
            native = _post(svc, "/embedding", content="abc", embd_normalize=-1)[0]["embedding"]
            if pooling == "none":
                assert len(native) == 5 and all(len(r) == 64 for r in native), "a vector per token"
                refused = _post(svc, "/v1/embeddings", status=400, input="abc")
                assert "not OAI compatible" in refused["error"]["message"]
                rows[pooling] = native
                continue
            assert len(native) == 1, f"--pooling {pooling}: one vector"
            rows[pooling] = native[0], _post(svc, "/v1/embeddings", input="abc")["data"][0]["embedding"]
    tokens = rows["none"]
    for pooling, want in (("cls", tokens[0]), ("last", tokens[-1])):
        raw, normalised = rows[pooling]
        assert close_vectors(raw, want), f"--pooling {pooling}: {raw[:4]} vs {want[:4]}"
        assert close_vectors(normalised, unit_vector(want)), f"--pooling {pooling}: normalised"
    assert not close_vectors(rows["cls"][0], rows["last"][0])


def test_np_auto_is_four_slots_that_may_each_fill_the_context(tmp_path: Path) -> None:
    """No ``-np`` (llama-server's auto): 4 slots in one KV pool, so one request may use all of ``-c``
    (``-np 2`` above gives each slot 256 of the same 512)."""
    for svc in _serve(tmp_path, "-c", "512"):
        props = httpx.get(f"{svc.url}/props", timeout=60)
        assert props.status_code == 200, props.text
        assert props.json()["default_generation_settings"]["n_ctx"] == 512 and props.json()["total_slots"] == 4
        slots = httpx.get(f"{svc.url}/slots", timeout=30).json()
        assert len(slots) == 4 and {s["n_ctx"] for s in slots} == {512}, slots
        assert _post(svc, "/v1/completions", prompt=[7] * 300, max_tokens=2)["usage"]["prompt_tokens"] == 300
        error = _post(svc, "/completion", status=400, prompt=[7] * 600, n_predict=1)["error"]
        assert (error["type"], error["n_ctx"], error["n_prompt_tokens"]) == ("exceed_context_size_error", 512, 600)


def test_context_options_on_the_command_line_reach_the_model(tmp_path: Path) -> None:
    """``-fa on -ctk q8_0 -ctv q8_0 -ub 64`` (llama-server's KV-cache quantization): in force, not ignored,
    and the model answers with them (tests/workers/inference/llama/test_context_options.py: what they change)."""
    model = write_tiny_gguf(tmp_path / "h32.gguf", n_embd=128, n_head=4)  # heads of 32 values: a q8_0 block
    flags = ("-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-ub", "64")
    with ServiceProcess(tmp_path / "home", args=["-m", str(model), *flags]) as svc:
        assert _post(svc, "/completion", prompt="hello there", n_predict=3)["tokens_predicted"] > 0
        configured = events(svc, type="model_configured")[-1]["data"]
        assert {"flash-attn", "cache-type-k", "cache-type-v", "ubatch-size"} <= set(configured["args"]), configured
        assert not {"flash-attn", "cache-type-k", "cache-type-v", "ubatch-size"} & set(configured["ignored"])
