"""Fair queues (issue 34) through the real service, a real worker with one slot (``-np 1``) and real
clients: one key's batch does not make another key's request wait for the whole batch, a higher
priority goes first, and a client that hangs up while it waits leaves the queue.

Named keys are made as ``modelrouter keys add`` records them: a ``key_created`` event in the log
(:func:`service.core.key_commands.decide_create`, the secret's salted digest), which the service's
tail folds. The order is measured in answers, never in seconds: B's answer must come before the
third of the batch's answers still to come when B was sent (not the 41st).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import ollama
import openai
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core.key_commands import ScopeRequest, decide_create
from service.core.keys import digest_secret
from service.core.state import RouterState
from service.event_store.codec import NewEvent
from service.event_store.sync_store import SyncEventStore
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(300)

FULL = "sk-fair-queues-full-key-0123456789"
MODEL = "tiny-a"
LONG = {"model": MODEL, "prompt": "once upon a time", "n_predict": 200, "ignore_eos": True}
"""A batch request: 200 tokens (the tiny model's context is 256), long beside a request's trip to the gate."""
BATCH = 40


def _headers(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@contextmanager
def _serve(root: Path, *keys: str) -> Iterator[ServiceProcess]:
    """The service over one tiny model with one slot, loaded; ``keys``: its ``--api-key``s."""
    write_tiny_gguf(root / "models" / f"{MODEL}.gguf", seed=1)
    args = ["--models-dir", str(root / "models"), "-np", "1", "-c", "256"]
    for key in keys:
        args += ["--api-key", key]
    proc = ServiceProcess(root / "home", args=args).start()
    try:
        headers = _headers(keys[0]) if keys else {}
        answer = httpx.post(f"{proc.url}/models/load", json={"model": MODEL}, headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text

        def loaded() -> bool:
            data = httpx.get(f"{proc.url}/models", headers=headers, timeout=10).json()["data"]
            return any(m["id"] == MODEL and m["status"]["value"] == "loaded" for m in data)

        eventually(loaded, f"{MODEL} loaded", timeout=120, interval=0.05)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with _serve(tmp_path_factory.mktemp("fair"), FULL) as proc:
        yield proc


def add_key(svc: ServiceProcess, name: str, priority: int = 0) -> str:
    """A named key recorded in the log as ``keys add`` records it; its secret once the service has it."""
    key_id, salt = secrets.token_hex(6), secrets.token_hex(16)
    secret = f"mr-{key_id}-{secrets.token_urlsafe(24)}"
    scope = ScopeRequest(priority=priority)
    created = decide_create(RouterState(), name, scope, key_id=key_id, salt=salt, digest=digest_secret(salt, secret))
    SyncEventStore(svc.home / "modelrouter.db", source={"kind": "test"}).append([NewEvent(created)])

    def known() -> bool:
        answer = httpx.get(f"{svc.url}/v1/models", headers=_headers(secret), timeout=10)
        return answer.status_code == 200  # 401 until the key middleware finds it (branch i34-keys)

    eventually(known, f"the service to know key {name!r}", timeout=30, interval=0.05)
    return secret


def _completed_by(svc: ServiceProcess) -> list[str]:
    """The callers of every ``request_completed`` of the model, in log order."""
    params: dict[str, str | int] = {"type": "request_completed", "model": MODEL, "limit": 1000}
    page = httpx.get(f"{svc.url}/events", params=params, headers=_headers(FULL), timeout=10).json()
    assert page["next_after"] is None
    return [e["data"]["key"] for e in page["events"]]


class Batch:
    """``BATCH`` requests of one key sent at once; counts their answers as they arrive."""

    def __init__(self, svc: ServiceProcess, secret: str, size: int = BATCH) -> None:
        self.svc, self.secret, self.size = svc, secret, size
        self.answered = 0

    async def run(self, meanwhile: Callable[[], Any]) -> tuple[int, int]:
        """Send the batch, wait until nearly all of it waits in the router, then run ``meanwhile``
        (blocking, in a thread); answers the batch's answers counted before and after it."""
        limits = httpx.Limits(max_connections=self.size + 4)
        async with httpx.AsyncClient(
            base_url=self.svc.url, headers=_headers(self.secret), timeout=240, limits=limits
        ) as client:
            tasks = [asyncio.create_task(self._one(client)) for _ in range(self.size)]
            await self._until_queued(client, self.size - 5)
            before = self.answered
            await asyncio.to_thread(meanwhile)
            after = self.answered
            await asyncio.gather(*tasks)
        assert self.answered == self.size
        return before, after

    async def _one(self, client: httpx.AsyncClient) -> None:
        answer = await client.post("/completion", json=LONG)
        assert answer.status_code == 200, answer.text
        self.answered += 1

    async def _until_queued(self, client: httpx.AsyncClient, at_least: int) -> None:
        try:
            async with asyncio.timeout(120):
                while (await client.get("/health")).json()["queued_requests"] < at_least:
                    await asyncio.sleep(0.01)
        except TimeoutError:
            raise AssertionError(f"{at_least} of the batch never waited in the router at once") from None


def _chat_openai(svc: ServiceProcess, secret: str) -> Callable[[], Any]:
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=secret, max_retries=0, timeout=240)
    return lambda: client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )


def _chat_ollama(svc: ServiceProcess, secret: str) -> Callable[[], Any]:
    client = ollama.Client(host=svc.url, headers=_headers(secret), timeout=240)
    return lambda: client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}], options={"num_predict": 4})


@pytest.mark.parametrize("dialect", ["openai", "ollama"])
def test_another_key_waits_for_two_of_a_batch_of_forty_not_all_of_it(svc: ServiceProcess, dialect: str) -> None:
    batch = add_key(svc, f"batch-{dialect}")
    chat = add_key(svc, f"chat-{dialect}")
    single = (_chat_openai if dialect == "openai" else _chat_ollama)(svc, chat)
    before, after = asyncio.run(Batch(svc, batch).run(single))
    assert after - before <= 2, f"{after - before} of the batch were answered before the other key's one request"
    assert BATCH - after >= 20, "the batch had not queued: the test proves nothing"


def test_a_higher_priority_key_goes_first_and_a_client_that_hangs_up_leaves_the_queue(svc: ServiceProcess) -> None:
    batch_secret = add_key(svc, "batch-p")
    urgent = add_key(svc, "urgent", priority=9)
    patient = add_key(svc, "patient", priority=-1)  # behind the whole batch
    batch = Batch(svc, batch_secret)
    waited: list[int] = []

    def meanwhile() -> None:
        with pytest.raises(httpx.TimeoutException):  # hangs up while it waits behind the batch
            httpx.post(f"{svc.url}/completion", json=LONG, headers=_headers(patient), timeout=0.5)
        before = batch.answered
        answer = httpx.post(f"{svc.url}/completion", json=LONG, headers=_headers(urgent), timeout=240)
        assert answer.status_code == 200, answer.text
        waited.append(batch.answered - before)

    _, after = asyncio.run(batch.run(meanwhile))
    assert waited[0] <= 2, f"the urgent key waited for {waited[0]} of the batch"
    assert BATCH - after >= 10, "the batch had not queued: the test proves nothing"
    health = httpx.get(f"{svc.url}/health", timeout=10).json()
    assert health["queued_requests"] == 0, health
    # The leaver's place was given up, not its turn taken: the model's one slot is free for the next.
    answer = httpx.post(f"{svc.url}/completion", json=LONG, headers=_headers(urgent), timeout=60)
    assert answer.status_code == 200, answer.text
    eventually(lambda: _completed_by(svc).count("urgent") == 2, "the urgent key's requests recorded", timeout=30)
    callers = _completed_by(svc)
    assert callers.count("batch-p") == BATCH
    assert "patient" not in callers, "a client that hung up while it waited was served anyway"


def test_without_named_keys_every_request_goes_to_the_worker_at_once(tmp_path: Path) -> None:
    """Anonymous traffic keeps llama-server's queue: the worker's, in arrival order, none in the router."""

    async def run(url: str) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=url, timeout=240) as client:
            tasks = [asyncio.create_task(client.post("/completion", json=LONG)) for _ in range(5)]
            try:
                async with asyncio.timeout(120):
                    while (health := (await client.get("/health")).json())["requests_in_flight"] < 5:
                        await asyncio.sleep(0.01)
            finally:
                answers = await asyncio.gather(*tasks)
            assert all(a.status_code == 200 for a in answers)
            return dict(health)

    with _serve(tmp_path) as proc:
        health = asyncio.run(run(proc.url))
    assert health["queued_requests"] == 0, f"requests waited in the router without named keys: {health}"
