"""llama-server's ``-to``/``--timeout`` on the service's port, as an ASGI middleware (``service.api.timeouts``);
the end-to-end test through uvicorn is ``tests/e2e/test_hung_worker.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from service.api.timeouts import BodyReadTimeout, io_timeout_middleware

HTTP = {"type": "http", "path": "/v1/chat/completions"}


async def _never() -> Any:
    await asyncio.Event().wait()


async def test_a_body_that_stops_arriving_is_a_408_and_the_wait_for_a_hang_up_is_unlimited() -> None:
    parts = [{"type": "http.request", "body": b"{", "more_body": True}]
    seen: list[str] = []

    async def receive() -> Any:
        return parts.pop(0) if parts else await _never()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["type"])
        await receive()

    with pytest.raises(BodyReadTimeout) as raised:
        await asyncio.wait_for(io_timeout_middleware(0.05)(app)(HTTP, receive, _never), 5)
    assert raised.value.status == 408 and seen == ["http.request"]

    whole = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive_whole() -> Any:
        return whole.pop(0) if whole else await _never()

    task = asyncio.ensure_future(io_timeout_middleware(0.05)(app)(HTTP, receive_whole, _never))
    await asyncio.sleep(0.2)  # four timeouts' worth: waiting for the hang-up is not timed
    assert not task.done()
    task.cancel()


async def test_an_answer_the_client_takes_no_bytes_of_is_abandoned() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})

    sent: list[str] = []

    async def slow_client(message: Any) -> None:
        sent.append(message["type"])
        if message["type"] == "http.response.body":
            await _never()

    await asyncio.wait_for(io_timeout_middleware(0.05)(app)(HTTP, _never, slow_client), 5)
    assert sent == ["http.response.start", "http.response.body"]
