"""llama-server's resumable streams by ``X-Conversation-Id`` (``GET /v1/stream``, ``POST
/v1/streams/lookup``, ``DELETE /v1/stream``), on a real worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eventually import eventually


def _events(raw: bytes) -> list[Any]:
    lines = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


@pytest.mark.timeout(120)
def test_a_stream_outlives_its_client_and_replays(spawn_worker: Any, tiny_gguf: Path) -> None:
    url = spawn_worker(tiny_gguf, "-np", "2").wait_ready()
    body = {"prompt": "once upon a time", "n_predict": 40, "temperature": 0, "ignore_eos": True, "stream": True}
    head = b""
    with httpx.stream("POST", url + "/completion", json=body, headers={"X-Conversation-Id": "c1"}, timeout=60) as r:
        assert r.status_code == 200
        for part in r.iter_raw():
            head += part
            if head.count(b"\n\n") >= 2:
                break  # hang up after two events
    lookup = httpx.post(url + "/v1/streams/lookup", json={"conversation_ids": ["c1", "nobody"]}, timeout=30).json()
    assert [s["conversation_id"] for s in lookup] == ["c1"] and lookup[0]["started_at"] > 0

    def finished() -> Any:
        found = httpx.post(url + "/v1/streams/lookup", json={"conversation_ids": ["c1"]}, timeout=30).json()
        return found[0] if found and found[0]["is_done"] else None

    done = eventually(finished, "the generation to finish without its client")
    whole = httpx.get(url + "/v1/stream", params={"conv_id": "c1", "from": 0}, timeout=60)
    assert whole.status_code == 200 and whole.headers["content-type"] == "text/event-stream"
    assert whole.content.startswith(head) and len(whole.content) == done["total_bytes"]
    events = _events(whole.content)
    assert events[-1]["stop"] is True and events[-1]["tokens_predicted"] == 40, "it went on without the client"
    assert len(events) > 2 and all(e["stop"] is False for e in events[:-1])
    tail = httpx.get(url + "/v1/stream", params={"conv_id": "c1", "from": len(head)}, timeout=60).content
    assert head + tail == whole.content
    assert httpx.delete(url + "/v1/stream", params={"conv_id": "c1"}, timeout=30).status_code == 204
    assert httpx.get(url + "/v1/stream", params={"conv_id": "c1"}, timeout=30).status_code == 404
    assert httpx.delete(url + "/v1/stream", params={"conv_id": "c1"}, timeout=30).status_code == 204  # idempotent
    assert httpx.delete(url + "/v1/stream", timeout=30).status_code == 400
    assert httpx.get(url + "/v1/stream", timeout=30).json()["error"]["message"] == "Missing conversation id in path"


@pytest.mark.timeout(120)
def test_delete_stops_the_generation_and_a_new_stream_replaces_the_old(spawn_worker: Any, tiny_gguf: Path) -> None:
    # An endless generation (no n_predict, no EOS, a full context shifts): only the DELETE can end it, so
    # what follows cannot depend on how fast the machine generates.
    url = spawn_worker(tiny_gguf, "-np", "1", "-c", "256", "--context-shift").wait_ready()
    body = {"prompt": "go", "n_predict": -1, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url + "/completion", json=body, headers={"x-conversation-id": "long"}, timeout=60) as r:
        next(r.iter_raw())
    busy = httpx.get(url + "/slots", timeout=30).json()[0]
    assert busy["is_processing"], "the generation stopped when its client left"
    assert httpx.delete(url + "/v1/stream", params={"conv_id": "long"}, timeout=30).status_code == 204
    eventually(lambda: not httpx.get(url + "/slots", timeout=30).json()[0]["is_processing"], "the slot to be freed")
    bad = httpx.get(url + "/v1/stream", params={"conv_id": "long", "from": "x"}, timeout=30)
    assert bad.status_code == 404, "deleted streams are forgotten"
    short = {**body, "n_predict": 3}  # ends on its own
    for _ in range(2):
        with httpx.stream("POST", url + "/completion", json=short, headers={"X-Conversation-Id": "again"}) as r:
            r.read()
    found = httpx.post(url + "/v1/streams/lookup", json={"conversation_ids": ["again"]}, timeout=30).json()
    assert len(found) == 1 and found[0]["is_done"]
    assert httpx.get(url + "/v1/stream", params={"conv_id": "again", "from": "x"}, timeout=30).status_code == 400
