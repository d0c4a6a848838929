"""llama-server's resumable streams through the router (``GET``/``DELETE /v1/stream``,
``POST /v1/streams/lookup`` by ``X-Conversation-Id``): routed to the worker that serves
the conversation, in router mode with ``--api-key`` and in single-model mode (``-m``)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from tests.dropin.conftest import Serve, models, wait_until
from tests.eventually import eventually

KEY = "sk-streams-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
ENDLESS = {"prompt": "go", "n_predict": -1, "temperature": 0, "ignore_eos": True, "stream": True}


def _events(raw: bytes) -> list[Any]:
    lines = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def _lookup(svc: ServiceProcess, *ids: str) -> list[dict[str, Any]]:
    answer = httpx.post(f"{svc.url}/v1/streams/lookup", json={"conversation_ids": list(ids)}, headers=AUTH, timeout=30)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()
    return found


def _start(svc: ServiceProcess, conv: str, body: dict[str, Any]) -> bytes:
    """A streamed completion of conversation ``conv``, hung up on after two events."""
    head = b""
    with httpx.stream(
        "POST", f"{svc.url}/completion", json=body, timeout=120, headers={**AUTH, "X-Conversation-Id": conv}
    ) as r:
        assert r.status_code == 200, r.read()
        for part in r.iter_raw():
            head += part
            if head.count(b"\n\n") >= 2:
                break
    return head


def _processing(svc: ServiceProcess) -> bool:
    slots = httpx.get(f"{svc.url}/slots", params={"model": "tiny-a"}, headers=AUTH, timeout=30).json()
    return any(s["is_processing"] for s in slots)


def _usage_total(svc: ServiceProcess, requests: int) -> dict[str, Any] | None:
    total: dict[str, Any] = httpx.get(f"{svc.url}/usage", headers=AUTH, timeout=30).json()["total"]
    return total if total["requests"] == requests else None


def _error(answer: httpx.Response) -> Any:
    return answer.json()["error"]


@pytest.mark.timeout(240)
def test_a_conversation_resumes_is_listed_and_stops_through_the_router(serve: Serve, models_dir: Path) -> None:
    """An endless generation (only the DELETE ends it) outlives its client; ``GET /v1/stream``
    replays and follows it from the worker that serves it; lookup lists only ids asked about;
    DELETE stops it; once the model is unloaded, its conversations are llama.cpp's "not found"."""
    svc = serve("--models-dir", str(models_dir), "--api-key", KEY, "-c", "256", "-np", "2", "--context-shift")
    head = _start(svc, "conv-1", {**ENDLESS, "model": "tiny-a"})
    assert _events(head)[0]["stop"] is False
    (found,) = _lookup(svc, "conv-1", "nobody")
    assert found["conversation_id"] == "conv-1" and found["is_done"] is False and found["total_bytes"] >= len(head)
    assert _processing(svc), "the generation went on without its client"

    more = b""
    with httpx.stream(
        "GET", f"{svc.url}/v1/stream", params={"conv_id": "conv-1", "from": 0}, headers=AUTH, timeout=60
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for part in r.iter_raw():
            more += part
            if len(more) > len(head) and more.count(b"\n\n") >= 4:
                break
    assert more.startswith(head), "the replay starts with what the first client got"
    assert len(_events(more)) > len(_events(head)), "and goes on with the rest"

    unauthorised = httpx.get(f"{svc.url}/v1/stream", params={"conv_id": "conv-1"}, timeout=30)
    assert unauthorised.status_code == 401
    missing = httpx.get(f"{svc.url}/v1/stream", headers=AUTH, timeout=30)
    assert missing.status_code == 400 and _error(missing)["message"] == "Missing conversation id in path"
    assert httpx.delete(f"{svc.url}/v1/stream", headers=AUTH, timeout=30).status_code == 400

    assert (
        httpx.delete(f"{svc.url}/v1/stream", params={"conv_id": "conv-1"}, headers=AUTH, timeout=30).status_code == 204
    )
    wait_until(lambda: not _processing(svc), "the DELETE to stop the generation")
    gone = httpx.get(f"{svc.url}/v1/stream", params={"conv_id": "conv-1"}, headers=AUTH, timeout=30)
    assert gone.status_code == 404
    assert _error(gone) == {"code": 404, "message": "Stream not found or expired", "type": "not_found_error"}
    assert _lookup(svc, "conv-1") == []
    assert (
        httpx.delete(f"{svc.url}/v1/stream", params={"conv_id": "conv-1"}, headers=AUTH, timeout=30).status_code == 204
    )

    done = _start(svc, "conv-2", {**ENDLESS, "model": "tiny-a", "n_predict": 4})
    wait_until(lambda: bool(_lookup(svc, "conv-2")) and _lookup(svc, "conv-2")[0]["is_done"], "conv-2 to end")
    whole = httpx.get(f"{svc.url}/v1/stream", params={"conv_id": "conv-2"}, headers=AUTH, timeout=60)
    assert whole.status_code == 200 and whole.content.startswith(done)
    assert _events(whole.content)[-1]["stop"] is True

    unload = httpx.post(f"{svc.url}/models/unload", json={"model": "tiny-a"}, headers=AUTH, timeout=30)
    assert unload.status_code == 200
    wait_until(lambda: models(svc, **AUTH)["tiny-a"]["status"]["value"] == "unloaded", "tiny-a to unload")
    after = httpx.get(f"{svc.url}/v1/stream", params={"conv_id": "conv-2"}, headers=AUTH, timeout=30)
    assert after.status_code == 404 and _error(after)["message"] == "Stream not found or expired"
    assert _lookup(svc, "conv-2") == []
    assert (
        httpx.delete(f"{svc.url}/v1/stream", params={"conv_id": "conv-2"}, headers=AUTH, timeout=30).status_code == 204
    )
    assert models(svc, **AUTH)["tiny-a"]["status"]["value"] == "unloaded", "no stream route loads a model"


@pytest.mark.timeout(240)
def test_single_model_mode_routes_conversations_to_its_model(serve: Serve, models_dir: Path) -> None:
    """``-m FILE``: a completion naming no model keeps its stream; replay, lookup and DELETE reach it."""
    svc = serve("-m", str(models_dir / "tiny-a.gguf"), "--api-key", KEY)
    body = {"prompt": "once upon a time", "n_predict": 6, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.stream(
        "POST", f"{svc.url}/completion", json=body, timeout=120, headers={**AUTH, "x-conversation-id": "solo"}
    ) as r:
        sent = r.read()
    assert _events(sent)[-1]["stop"] is True
    (found,) = _lookup(svc, "solo")
    assert found["is_done"] is True and found["total_bytes"] == len(sent)
    replay = httpx.get(f"{svc.url}/v1/stream", params={"conv_id": "solo", "from": 0}, headers=AUTH, timeout=60)
    assert replay.status_code == 200 and replay.content == sent
    tail = httpx.get(f"{svc.url}/v1/stream", params={"conv_id": "solo", "from": 10}, headers=AUTH, timeout=60)
    assert tail.content == sent[10:]
    # Usage (issue 34): three requests, but only the one that generated is charged tokens, the replays none.
    last = _events(sent)[-1]
    total = eventually(lambda: _usage_total(svc, requests=3), "the three requests in GET /usage", timeout=30)
    assert (total["prompt_tokens"], total["completion_tokens"]) == (last["tokens_evaluated"], last["tokens_predicted"])
    assert httpx.delete(f"{svc.url}/v1/stream", params={"conv_id": "solo"}, headers=AUTH, timeout=30).status_code == 204
    assert httpx.get(f"{svc.url}/v1/stream", params={"conv_id": "solo"}, headers=AUTH, timeout=30).status_code == 404
    assert _lookup(svc, "solo") == []


@pytest.mark.timeout(240)
def test_a_stop_cancels_a_request_still_waiting_for_its_model(serve: Serve, models_dir: Path) -> None:
    """llama.cpp's ticket: ``DELETE /v1/stream`` of a conversation whose request waits for its model
    (loading, then held 2 s by ``LLAMA_SERVER_DEBUG_FAKE_TIMING`` before it is sent) cancels it."""
    svc = serve("--models-dir", str(models_dir), env={"LLAMA_SERVER_DEBUG_FAKE_TIMING": "1"})
    body = {"model": "tiny-b", "prompt": "x", "n_predict": 2, "stream": True}
    with ThreadPoolExecutor(1) as pool:
        parked = pool.submit(
            httpx.post, f"{svc.url}/completion", json=body, timeout=120, headers={"X-Conversation-Id": "parked"}
        )
        wait_until(lambda: models(svc)["tiny-b"]["status"]["value"] in ("loading", "loaded"), "tiny-b to load")
        stop = httpx.delete(f"{svc.url}/v1/stream", params={"conv_id": "parked"}, timeout=30)
        assert stop.status_code == 204
        answer = parked.result()
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"] == "request cancelled by a stop while the model was loading"
    lookup = httpx.post(f"{svc.url}/v1/streams/lookup", json={"conversation_ids": ["parked"]}, timeout=30)
    assert lookup.json() == [], "it never reached the worker"
