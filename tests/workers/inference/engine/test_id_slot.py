"""llama-server's ``id_slot``: a request may name the slot it runs in.

As in llama-server (``get_available_slot``, ``get_slot_by_id``): the slot is
taken modulo the slot count, -1 means any idle slot, and a request whose slot
is busy waits for it while requests behind it in the queue go ahead.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from tests.eventually import eventually
from workers.inference.engine._slots import Request, Slot, SlotState, pick_slot


def slots(*caches: list[int]) -> list[Slot]:
    return [Slot(id=i, n_ctx=64, cache=list(c), last_used=float(i)) for i, c in enumerate(caches)]


def test_a_named_slot_is_taken_even_when_another_shares_more_and_waited_for_when_busy() -> None:
    pool = slots([1, 2, 3, 4], [9, 9])
    assert pick_slot(pool, [1, 2, 3, 4, 5]) == (pool[0], 4)
    assert pick_slot(pool, [1, 2, 3, 4, 5], id_slot=1) == (pool[1], 0)
    assert pick_slot(pool, [1, 2, 3, 4, 5], id_slot=2) == (pool[0], 4), "modulo the slots, as llama-server"
    pool[0].begin(Request([1], None, 1), 0, 0.0)  # type: ignore[arg-type]
    assert pool[0].state is SlotState.PROMPT
    assert pick_slot(pool, [1, 2, 3, 4, 5], id_slot=0) is None
    assert pick_slot(pool, [1, 2, 3, 4, 5]) == (pool[1], 0)


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def complete(url: str, prompt: str, **extra: Any) -> httpx.Response:
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0, **extra}
    return httpx.post(f"{url}/completion", json=body, timeout=120)


@pytest.mark.timeout(180)
def test_id_slot_through_completion_and_chat(spawn_worker: Any, gguf: Path) -> None:
    url = spawn_worker(gguf, "--n-ctx", "1024", "--n-parallel", "2").wait_ready()
    for named in (0, 1, 0, 3):  # 3: slot 1, modulo the two slots
        r = complete(url, "the same prompt every time", id_slot=named)
        assert r.status_code == 200 and r.json()["id_slot"] == named % 2, r.text
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "id_slot": 1}
    r = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=120)
    assert r.status_code == 200, r.text
    assert complete(url, "any", id_slot=-1).status_code == 200
    bad = complete(url, "x", id_slot="first")
    assert bad.status_code == 400 and "'id_slot' must be an integer" in bad.text


@pytest.mark.timeout(180)
def test_a_request_for_a_busy_slot_waits_while_the_next_one_goes(spawn_worker: Any, tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "tiny-64k.gguf", n_ctx=65536)
    url = spawn_worker(model, "--n-ctx", "65536", "--n-parallel", "2").wait_ready()  # 32k tokens a slot

    def queued() -> bool:
        return "llamacpp:requests_deferred 1" in httpx.get(f"{url}/metrics", timeout=30).text

    busy = {"prompt": "a long story", "n_predict": -1, "ignore_eos": True, "stream": True, "id_slot": 0}
    done: dict[str, Any] = {}
    with httpx.stream("POST", f"{url}/completion", json=busy, timeout=120) as long_run:
        lines = long_run.iter_lines()
        next(
            line for line in lines if line.startswith("data: ")
        )  # generating (partials say id_slot -1, as llama-server's)
        assert [s["is_processing"] for s in httpx.get(f"{url}/slots", timeout=30).json()] == [True, False]
        waiting = threading.Thread(target=lambda: done.setdefault("named", complete(url, "me too", id_slot=0)))
        waiting.start()
        eventually(queued, "the request for slot 0 queued", timeout=60, interval=0.01)
        behind = complete(url, "and me")  # queued after the named one: it must not wait behind it
        assert behind.status_code == 200 and behind.json()["id_slot"] == 1
        assert "named" not in done, "slot 0 is still busy with the long run"
        more = next(line for line in lines if line.startswith("data: "))
        assert json.loads(more[6:])["stop"] is False, "the long run goes on"
    waiting.join(120)  # the long run's client hung up: slot 0 is free
    named = done["named"]
    assert named.status_code == 200 and named.json()["id_slot"] == 0
