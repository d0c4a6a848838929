"""Speculative decoding in a real worker (issue 33): a worker with ``--spec-type ngram-simple`` against
one without, on the same tiny model, the same requests.

The tiny model is random: at temperature 0 it soon loops, so the n-gram drafter (made eager here:
3-token look-ups) drafts often and is often right, and sometimes wrong. Every reply must be the
plain worker's, token for token (the byte-level vocabulary makes text equality token equality),
with sampling too: the chain samples the same rows in the same order, so a seed gives the same text.
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually
from tests.workers.conftest import REPO_ROOT, WorkerProc, load_failure, started_worker, worker_command, worker_env

Spawn = Callable[..., WorkerProc]

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.timeout(300)

SPEC = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8"]
COMMON = ["--n-ctx", "4096", "--n-parallel", "4"]
"""A KV stream per slot (llama-server's layout for an explicit ``-np``). With it a slot drafts only when every
generating slot does (speculative._step_cost): the tests of drafts verified four at a time use a worker that
drafts as llama-server does (``eager``)."""


def _started(stack: contextlib.ExitStack, tmp: Path, gguf: Path, name: str, extra: list[str]) -> WorkerProc:
    """A ready worker of its own folder under ``tmp``, killed when ``stack`` closes."""
    (tmp / name).mkdir()
    return stack.enter_context(started_worker(tmp / name, gguf, name, [*COMMON, *extra]))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("spec")
    gguf = write_tiny_gguf(tmp / "tiny.gguf", seed=7)
    with contextlib.ExitStack() as stack:
        plain, spec = _started(stack, tmp, gguf, "plain", []), _started(stack, tmp, gguf, "spec", SPEC)
        yield plain.endpoint, spec.endpoint


def complete(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def prompts(n: int, seed: int = 33) -> list[str]:
    """Text with repeats in it (what n-gram drafting feeds on), and text without."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        piece = "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(4, 12)))
        out.append(piece * rng.randint(1, 4) + "".join(rng.choice("xyz, ") for _ in range(i % 5)))
    return out


def both(pair: tuple[str, str], bodies: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each body through the plain and the speculative worker, four at a time on each (slots busy together:
    both decode batches of rows, so a single row's other rounding never tells them apart)."""
    plain, spec = pair
    with ThreadPoolExecutor(4) as pool:
        a = list(pool.map(lambda b: complete(plain, b), bodies))
        b = list(pool.map(lambda b: complete(spec, b), bodies))
    return list(zip(a, b, strict=True))


@pytest.fixture(scope="module")
def eager(pair: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The plain worker and one that drafts every step it can, as llama-server (``--no-spec-adaptive``:
    beside slots without a draft too), so four requests at a time verify drafts in shared steps."""
    tmp = tmp_path_factory.mktemp("eager")
    gguf = write_tiny_gguf(tmp / "tiny.gguf", seed=7)
    with contextlib.ExitStack() as stack:
        yield pair[0], _started(stack, tmp, gguf, "eager", [*SPEC, "--no-spec-adaptive"]).endpoint


def test_greedy_replies_are_the_plain_ones_token_for_token(eager: tuple[str, str]) -> None:
    bodies = [{"prompt": p, "n_predict": 48, "temperature": 0} for p in prompts(56)]
    drafted = accepted = 0
    for plain, spec in both(eager, bodies):
        assert spec["content"] == plain["content"]
        assert spec["timings"]["predicted_n"] == plain["timings"]["predicted_n"]
        assert "draft_n" not in plain["timings"]  # as llama-server: only a request that drafted has them
        drafted += spec["timings"].get("draft_n", 0)
        accepted += spec["timings"].get("draft_n_accepted", 0)
    assert accepted > 0 and drafted > accepted  # drafts were taken, and some were not: both paths ran


OTHER_NGRAMS = {
    "ngram-map-k": ["--spec-ngram-map-k-size-n", "3", "--spec-ngram-map-k-size-m", "8"],
    "ngram-map-k4v": ["--spec-ngram-map-k4v-size-n", "3", "--spec-ngram-map-k4v-size-m", "8"],
    "ngram-mod": ["--spec-ngram-mod-n-match", "4", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "8"],
}


@pytest.mark.parametrize("kind", sorted(OTHER_NGRAMS))
def test_every_ngram_type_gives_the_plain_replies(pair: tuple[str, str], tmp_path: Path, kind: str) -> None:
    plain, _ = pair
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", seed=7)
    with contextlib.ExitStack() as stack:
        # as llama-server drafts (beside slots without a draft too): four at a time verify drafts together
        w = _started(stack, tmp_path, gguf, kind, ["--spec-type", kind, *OTHER_NGRAMS[kind], "--no-spec-adaptive"])
        bodies = [{"prompt": p, "n_predict": 48, "temperature": 0} for p in prompts(50)]
        with ThreadPoolExecutor(4) as pool:
            mine = list(pool.map(lambda b: complete(w.endpoint, b), bodies))
            theirs = list(pool.map(lambda b: complete(plain, b), bodies))
    assert [a["content"] for a in mine] == [a["content"] for a in theirs]
    assert sum(a["timings"].get("draft_n_accepted", 0) for a in mine) > 0, "drafts were taken"


def test_ngram_cache_drafts_from_a_lookup_cache_file(pair: tuple[str, str], tmp_path: Path) -> None:
    """ngram-cache counts n-grams only within each step's new tokens (llama.cpp's, kept), so what it
    drafts well comes from its files: a dynamic cache (``-lcd``) made from earlier replies, in
    llama.cpp's format, drafts the same replies again, and the text is the plain text."""
    from workers.inference.speculative._ngram_cache import NGRAM_MAX, NGRAM_MIN, ngram_cache_save, ngram_cache_update

    plain, _ = pair
    bodies = [{"prompt": p, "n_predict": 48, "temperature": 0} for p in prompts(12, seed=11)]
    theirs = [complete(plain, b) for b in bodies]
    cache: dict[Any, Any] = {}
    for body, answer in zip(bodies, theirs, strict=True):
        text = body["prompt"] + answer["content"]
        tokens = httpx.post(f"{plain}/tokenize", json={"content": text}, timeout=30).json()["tokens"]
        ngram_cache_update(cache, NGRAM_MIN, NGRAM_MAX, tokens, len(tokens))
    ngram_cache_save(cache, tmp_path / "dynamic.bin")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", seed=7)
    with contextlib.ExitStack() as stack:
        extra = ["--spec-type", "ngram-cache", "-lcd", str(tmp_path / "dynamic.bin")]
        w = _started(stack, tmp_path, gguf, "cache", extra)
        mine = [complete(w.endpoint, b) for b in bodies]
    assert [a["content"] for a in mine] == [a["content"] for a in theirs]
    assert sum(a["timings"].get("draft_n_accepted", 0) for a in mine) > 0, "drafts were taken"


def test_sampling_with_a_seed_gives_the_plain_text(eager: tuple[str, str]) -> None:
    """The chain samples the same rows in the same order as plain decoding, so each seed's reply is the
    plain one: the distributions are the same because every sample is (a stronger check than a test of
    frequencies, and one without a false-alarm rate)."""
    texts = prompts(24, seed=5)
    bodies = [
        {"prompt": texts[i % len(texts)], "n_predict": 40, "temperature": 0.6, "top_k": 3, "seed": 1000 + i}
        for i in range(48)
    ]
    accepted = 0
    for plain, spec in both(eager, bodies):
        assert spec["content"] == plain["content"]
        accepted += spec["timings"].get("draft_n_accepted", 0)
    assert accepted > 0


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"n_probs": 3}, id="n_probs"),
        pytest.param({"stop": ["ab", "h "]}, id="stop strings"),
        pytest.param({"n_predict": 20}, id="max_tokens"),
        pytest.param({"repeat_penalty": 1.05, "presence_penalty": 0.05}, id="penalties"),
        pytest.param({"grammar": "root ::= [a-h ]+"}, id="grammar"),
        pytest.param({"ignore_eos": True, "n_predict": 64}, id="ignore_eos"),
    ],
)
def test_engine_features_with_speculation_on(eager: tuple[str, str], extra: dict[str, Any]) -> None:
    bodies = [{"prompt": p, "n_predict": 48, "temperature": 0, **extra} for p in prompts(24)]
    replies = both(eager, bodies)
    assert sum(spec["timings"].get("draft_n_accepted", 0) for _, spec in replies) > 0, "drafts were taken"
    for plain, spec in replies:
        assert spec["content"] == plain["content"]
        assert same_probabilities(spec.get("completion_probabilities"), plain.get("completion_probabilities"))
        assert spec["stop_type"] == plain["stop_type"] and spec["stopping_word"] == plain["stopping_word"]
        if "n_predict" in extra:
            assert spec["timings"]["predicted_n"] <= extra["n_predict"]


def same_probabilities(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> bool:
    """The same tokens and candidates, their log-probabilities equal but for a batched decode's rounding."""
    if a is None or b is None:
        return a is b
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x["id"] != y["id"] or abs(x["logprob"] - y["logprob"]) > 1e-3:
            return False
        if [t["id"] for t in x["top_logprobs"]] != [t["id"] for t in y["top_logprobs"]]:
            return False
    return True


def test_prompt_reuse_and_an_exact_repeat(pair: tuple[str, str]) -> None:
    """A second request on the same prompt reuses the slot's cells (the drafts' rejected cells gone),
    and gives the same text."""
    _, spec = pair
    body: dict[str, Any] = {
        "prompt": "abcabcabcabc abc",
        "n_predict": 32,
        "temperature": 0,
        "id_slot": 1,
        "cache_prompt": True,
    }
    first, again = complete(spec, body), complete(spec, body)
    assert again["content"] == first["content"]
    assert again["timings"]["prompt_n"] <= 1  # the prompt's cells were kept
    longer = complete(spec, {**body, "prompt": body["prompt"] + first["content"]})
    assert longer["timings"]["cache_n"] >= len(body["prompt"])


def test_cancelling_a_drafting_stream_frees_its_slot(pair: tuple[str, str]) -> None:
    _, spec = pair
    body = {"prompt": "ab" * 20, "n_predict": 0, "temperature": 0, "stream": True, "id_slot": 2}
    with httpx.stream("POST", f"{spec}/completion", json=body, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)

    def freed() -> bool:
        slots = httpx.get(f"{spec}/slots", timeout=10).json()
        return not slots[2]["is_processing"]

    eventually(freed, "the cancelled slot to be idle", timeout=60)


def test_reporting_slots_props_and_metrics(pair: tuple[str, str]) -> None:
    plain, spec = pair
    # Its own drafts, whatever ran before it (the module's tests may run in any order).
    answers = [complete(spec, {"prompt": p, "n_predict": 48, "temperature": 0}) for p in prompts(24)]
    assert sum(a["timings"].get("draft_n_accepted", 0) for a in answers) > 0
    slots = httpx.get(f"{spec}/slots", timeout=10).json()
    assert all(s["speculative"] is True for s in slots)
    assert any(s.get("params", {}).get("speculative.types") == "ngram-simple" for s in slots)
    assert all(s["speculative"] is False for s in httpx.get(f"{plain}/slots", timeout=10).json())
    props = httpx.get(f"{spec}/props", timeout=10).json()
    assert props["default_generation_settings"]["params"]["speculative.types"] == "ngram-simple"
    metrics = httpx.get(f"{spec}/metrics", timeout=10).text
    values = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("llamacpp:spec_decode")
    }
    drafted = values["llamacpp:spec_decode_num_draft_tokens_total"]
    assert drafted > 0 and values["llamacpp:spec_decode_num_drafts_total"] > 0
    assert 0 < values["llamacpp:spec_decode_num_accepted_tokens_total"] <= drafted


def test_an_unknown_spec_type_is_refused_with_llama_cpp_s_words(tmp_path: Path) -> None:
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    run = subprocess.run(
        worker_command(gguf, instance_id="bad", events=tmp_path / "e.jsonl", extra=["--spec-type", "ngram-fancy"]),
        capture_output=True,
        cwd=REPO_ROOT,
        env=worker_env(),
        timeout=120,
        check=False,
    )
    assert run.returncode == 2
    assert b"unknown speculative type: ngram-fancy" in run.stderr


def _stream_lines(url: str, body: dict[str, Any], out: list[str], started: threading.Event) -> None:
    with httpx.stream("POST", f"{url}/completion", json={**body, "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                started.set()
                out.append(json.loads(line[6:]).get("content", ""))


def test_a_stream_carries_the_plain_text(pair: tuple[str, str]) -> None:
    """Several tokens accepted in one step reach a stream as separate chunks, in order."""
    plain, spec = pair
    body = {"prompt": "abcd abcd abcd abcd", "n_predict": 40, "temperature": 0}
    chunks: dict[str, list[str]] = {plain: [], spec: []}
    for url in (plain, spec):
        _stream_lines(url, body, chunks[url], threading.Event())
    assert "".join(chunks[spec]) == "".join(chunks[plain]) == complete(plain, body)["content"]


@pytest.fixture(scope="module")
def self_drafting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A worker whose draft model is its own model: every drafted token is the target's own choice."""
    tmp = tmp_path_factory.mktemp("draft")
    gguf = write_tiny_gguf(tmp / "tiny.gguf", seed=7)
    extra = ["--spec-type", "draft-simple", "-md", str(gguf), "--spec-draft-n-max", "8"]
    with contextlib.ExitStack() as stack:
        yield _started(stack, tmp, gguf, "drafting", extra).endpoint


def test_a_draft_model_that_is_the_target_accepts_every_draft(pair: tuple[str, str], self_drafting: str) -> None:
    plain, _ = pair
    drafting = self_drafting
    bodies = [{"prompt": p, "n_predict": 40, "temperature": 0} for p in prompts(16, seed=3)]
    with ThreadPoolExecutor(4) as pool:
        mine = list(pool.map(lambda b: complete(drafting, b), bodies))
    for body, answer in zip(bodies, mine, strict=True):
        assert answer["content"] == complete(plain, body)["content"]
        timings = answer["timings"]
        assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]


def test_a_draft_model_keeps_up_with_a_slot_s_new_prompts(self_drafting: str) -> None:
    """The draft sequence follows the slot: a longer prompt that starts with the last one, and another."""
    drafting = self_drafting
    first = complete(drafting, {"prompt": "abc abc", "n_predict": 12, "temperature": 0, "id_slot": 0})
    longer = {"prompt": "abc abc" + first["content"] + " and", "n_predict": 12, "temperature": 0, "id_slot": 0}
    other = {"prompt": "xyz", "n_predict": 12, "temperature": 0, "id_slot": 0}
    for body in (longer, other, longer):
        timings = complete(drafting, body)["timings"]
        assert timings["draft_n_accepted"] == timings["draft_n"] > 0


def _load_failure(spawn_worker: Spawn, gguf: Path, extra: list[str]) -> str:
    return load_failure(spawn_worker(gguf, *COMMON, *extra))


def test_a_draft_model_of_another_vocabulary_fails_the_load_with_llama_cpp_s_words(
    spawn_worker: Spawn, tmp_path: Path
) -> None:
    from devtools.tiny_gguf import write_tiny_bert

    gguf, bert = write_tiny_gguf(tmp_path / "tiny.gguf"), write_tiny_bert(tmp_path / "bert.gguf")
    why = _load_failure(spawn_worker, gguf, ["--spec-type", "draft-simple", "-md", str(bert)])
    assert "draft model vocab type must match target model to use speculation" in why


def test_draft_simple_without_a_draft_model_or_with_a_missing_one_fails_the_load(
    spawn_worker: Spawn, tmp_path: Path
) -> None:
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    assert "needs a draft model (-md FILE)" in _load_failure(spawn_worker, gguf, ["--spec-type", "draft-simple"])
    missing = str(tmp_path / "nowhere.gguf")
    why = _load_failure(spawn_worker, gguf, ["--spec-type", "draft-simple", "-md", missing])
    assert "did not load" in why and "nowhere.gguf" in why and "speculative_decoding" in why


def test_with_a_stream_per_slot_a_slot_drafts_only_beside_drafting_slots(pair: tuple[str, str]) -> None:
    """Beside a slot that drafts nothing, a draft would be decoded in a pass of its own that the other
    slot waits for: the looping request drafts alone, and drafts nothing while the other generates."""
    _, per_stream = pair
    looping = {"prompt": prompts(1, seed=5)[0], "n_predict": 64, "temperature": 0}
    alone = complete(per_stream, looping)
    assert alone["timings"].get("draft_n", 0) > 0
    # post_sampling_probs never drafts (its kept candidates are one row's); it outlasts the looping request.
    other = {"prompt": "xyz", "n_predict": 400, "ignore_eos": True, "n_probs": 1, "post_sampling_probs": True}
    out: list[str] = []
    started = threading.Event()
    beside = threading.Thread(target=_stream_lines, args=(per_stream, {**other, "stream": True}, out, started))
    beside.start()
    try:
        assert started.wait(60), "the other request started generating"
        together = complete(per_stream, looping)
        assert beside.is_alive(), "the other request was still generating"
    finally:
        beside.join(120)
    assert "draft_n" not in together["timings"]


def _draft_counts(url: str) -> tuple[float, float]:
    """``(drafts, drafted tokens)`` so far, from the worker's ``/metrics``."""
    lines = httpx.get(f"{url}/metrics", timeout=10).text.splitlines()
    values = {line.split()[0]: float(line.split()[1]) for line in lines if line.startswith("llamacpp:spec_decode")}
    return values["llamacpp:spec_decode_num_drafts_total"], values["llamacpp:spec_decode_num_draft_tokens_total"]


def test_on_the_cpu_a_slot_alone_never_verifies_one_row_past_a_tile(self_drafting: str) -> None:
    """ggml's CPU kernels take rows four at a time (speculative._step_cost.fit_tile): the self-drafting
    worker's full drafts of 8 (9 rows, every token accepted) are verified as 7 (8 rows)."""
    drafts, drafted = _draft_counts(self_drafting)
    answer = complete(self_drafting, {"prompt": "tile", "n_predict": 200, "temperature": 0, "ignore_eos": True})
    after_drafts, after_drafted = _draft_counts(self_drafting)
    assert answer["timings"]["draft_n_accepted"] == answer["timings"]["draft_n"] > 0
    per_draft = (after_drafted - drafted) / (after_drafts - drafts)
    assert 6.5 < per_draft <= 7, per_draft  # 8 a draft without the tile; the last ones shorter, by n_predict
