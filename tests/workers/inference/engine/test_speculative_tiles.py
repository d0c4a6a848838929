"""A speculative step's rows fill the CPU kernels' last tile (speculative._step_cost.tile_pad): a slot
alone that verifies 5 drafted tokens (6 rows) decodes 8 rows, two of them computed and thrown away.

The worker drafts with its own model (every draft accepted), so each step has the same 6 rows. The
thrown-away rows sit in the slot's sequence after its drafts: if they stayed in the KV cache, the next
step's tokens at those positions would fail llama.cpp's position check, and the reply would not be the
plain worker's, token for token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.workers.conftest import started_worker

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.timeout(300)

COMMON = ["--n-ctx", "4096", "--n-parallel", "4"]  # a KV stream per slot: one slot's rows, one micro-batch


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A plain worker and one drafting five tokens a step with its own model, on one tiny model."""
    tmp = tmp_path_factory.mktemp("tiles")
    gguf = write_tiny_gguf(tmp / "tiny.gguf", seed=7)
    drafting = ["--spec-type", "draft-simple", "-md", str(gguf), "--spec-draft-n-max", "5"]
    with contextlib.ExitStack() as stack:
        started = {}
        for name, extra in (("plain", []), ("five", drafting)):
            (tmp / name).mkdir()
            started[name] = stack.enter_context(started_worker(tmp / name, gguf, name, [*COMMON, *extra]))
        yield started["plain"].endpoint, started["five"].endpoint


def _complete(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{url}/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def _steps(url: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/engine/steps", timeout=30)
    assert r.status_code == 200
    return list(r.json()["steps"])


def test_a_step_of_six_rows_is_padded_to_eight_and_the_text_is_the_plain_text(workers: tuple[str, str]) -> None:
    plain, five = workers
    seen = len(_steps(five))
    body = {"prompt": "pad the tile", "n_predict": 80, "temperature": 0, "ignore_eos": True}
    answer = _complete(five, body)
    timings = answer["timings"]
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]
    decoding = [s["rows"] for s in _steps(five)[seen:] if s["decoded"] and not s["prefilled"]]
    assert 8 in decoding, decoding  # 1 + 5 drafted + 2 pad rows
    assert all(rows <= 4 or rows % 4 == 0 for rows in decoding), decoding
    assert answer["content"] == _complete(plain, body)["content"]
    again = {**body, "prompt": body["prompt"] + answer["content"], "n_predict": 40}  # the same slot's cache
    assert _complete(five, again)["content"] == _complete(plain, again)["content"]


def test_a_plain_worker_s_steps_are_not_padded(workers: tuple[str, str]) -> None:
    plain, _ = workers
    seen = len(_steps(plain))
    _complete(plain, {"prompt": "no drafts", "n_predict": 20, "temperature": 0, "ignore_eos": True})
    decoding = [s["rows"] for s in _steps(plain)[seen:] if s["decoded"] and not s["prefilled"]]
    assert decoding and set(decoding) == {1}, decoding
