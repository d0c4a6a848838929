"""Synthetic acceptance (``--spec-synth-rates``, ``--spec-synth-len``): llama-server's benchmarking aid,
where a random draw, not the target, decides whether a drafted token stands.

The workers draft three tokens a step with another tiny model (a draft the target mostly rejects),
as llama-server does (``--no-spec-adaptive``: every step drafts), so each step's draws are visible
in the request's ``draft_n`` and ``draft_n_accepted``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.workers.conftest import WorkerProc, load_failure, started_worker

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.timeout(300)

Spawn = Callable[..., WorkerProc]
COMMON = ["--n-ctx", "4096", "--n-parallel", "2"]
N_MAX = 3
BODY = {"prompt": "synthetic acceptance", "n_predict": 240, "temperature": 0, "ignore_eos": True, "seed": 42}


def _drafting(draft: Path) -> list[str]:
    return ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", str(N_MAX), "--no-spec-adaptive"]


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A plain worker, and three that draft with another model: every draft stands, none does, and a
    mean accepted length of 2 (the step's own token included)."""
    tmp = tmp_path_factory.mktemp("synth")
    gguf = write_tiny_gguf(tmp / "tiny.gguf", seed=7, n_ctx=1024)
    other = write_tiny_gguf(tmp / "other.gguf", seed=8, n_ctx=1024)
    kinds = {
        "plain": [],
        "all": [*_drafting(other), "--spec-synth-rates", "1,1,1"],
        "none": [*_drafting(other), "--spec-synth-rates", "0,0,0"],
        "len2": [*_drafting(other), "--spec-synth-len", "2"],
    }
    with contextlib.ExitStack() as stack:
        started = {}
        for name, extra in kinds.items():
            (tmp / name).mkdir()
            started[name] = stack.enter_context(started_worker(tmp / name, gguf, name, [*COMMON, *extra])).endpoint
        yield started


def _complete(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def test_rates_of_one_keep_every_draft_whatever_the_target_says(workers: dict[str, str]) -> None:
    answer = _complete(workers["all"], BODY)
    timings = answer["timings"]
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]
    # the drafts are another model's, so what stands is not the target's text
    assert answer["content"] != _complete(workers["plain"], BODY)["content"]
    assert timings["predicted_n"] == BODY["n_predict"]


def test_rates_of_zero_keep_none_and_the_text_is_the_target_s(workers: dict[str, str]) -> None:
    answer = _complete(workers["none"], BODY)
    timings = answer["timings"]
    assert timings["draft_n"] > 2 * BODY["n_predict"] and timings["draft_n_accepted"] == 0  # ~3 a step
    assert answer["content"] == _complete(workers["plain"], BODY)["content"]


def test_a_mean_length_keeps_about_that_many_and_a_seed_repeats_the_draws(workers: dict[str, str]) -> None:
    """``--spec-synth-len 2`` with three drafted tokens: each position stands with ``p, p², p³``,
    ``p + p² + p³ = 1``, so a draft keeps one token on average (standard deviation 1.1). Over ~120
    drafts the mean is within 0.4 of 1 with odds better than 10⁻⁴; with a fixed seed the draws, and
    so the counts and the text, repeat exactly."""
    first, again = _complete(workers["len2"], BODY), _complete(workers["len2"], BODY)
    timings = first["timings"]
    drafts = timings["predicted_n"] - timings["draft_n_accepted"] - 1  # each step but the first keeps its own
    assert drafts > 100
    assert 0.6 < timings["draft_n_accepted"] / drafts < 1.4, timings
    assert (again["content"], again["timings"]["draft_n_accepted"]) == (first["content"], timings["draft_n_accepted"])
    other_seed = _complete(workers["len2"], {**BODY, "seed": 7})["timings"]
    assert other_seed["draft_n_accepted"] != timings["draft_n_accepted"] or other_seed["draft_n"] != timings["draft_n"]


def _load_failure(spawn_worker: Spawn, gguf: Path, extra: list[str]) -> str:
    return load_failure(spawn_worker(gguf, *COMMON, *extra))


def test_options_llama_server_refuses_fail_the_load_with_its_words(spawn_worker: Spawn, tmp_path: Path) -> None:
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    drafting = _drafting(gguf)
    cases = {
        "synthetic acceptance requires an initialized speculative decoding context": ["--spec-synth-len", "2"],
        "synthetic acceptance rates must contain 3 values, got 2": [*drafting, "--spec-synth-rates", "0.5,0.4"],
        "synthetic acceptance length and rates are mutually exclusive": [
            *drafting,
            *("--spec-synth-len", "2", "--spec-synth-rates", "0.5,0.4,0.3"),
        ],
        "synthetic acceptance rates must be monotonically non-increasing": [
            *drafting,
            *("--spec-synth-rates", "0.5,0.6,0.3"),
        ],
        "synthetic acceptance length must be finite and within [1, 4]": [*drafting, "--spec-synth-len", "4.5"],
    }
    for words, extra in cases.items():
        assert words in _load_failure(spawn_worker, gguf, extra)
