"""The tail that keeps the live state current is supervised (issue 12 §5).

Its database connection is killed under it: the tail is restarted with
backoff; meanwhile ``/health`` answers 503 with the lag, and a command that
would append fails at once with 503 ``state_unavailable`` and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from devtools.tiny_gguf import write_tiny_gguf
from service.app import create_app
from service.event_store.live_state import LiveState, StateUnavailable
from service.settings import Settings
from tests.eventually import eventually_async


async def _until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    await eventually_async(predicate, what, timeout=timeout, interval=0.01)


async def test_a_killed_tail_connection_is_restarted_and_health_says_so(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_gguf(models / "tiny.gguf")
    settings = Settings(home=tmp_path / "home", models_dir=models)
    async with AsyncTestClient(app=create_app(settings)) as client:
        live: LiveState = client.app.state.runtime.live
        live.retry_base = 5.0  # a wide window to look at the service while the tail is down
        assert (await client.get("/health")).status_code == 200

        async def kill_tail_connection() -> None:  # runs on the app's own event loop
            assert live.connection is not None
            raw = await live.connection.get_raw_connection()
            await raw.driver_connection.close()

        client.blocking_portal.call(kill_tail_connection)  # the tail's connection dies under it

        await _until(lambda: not live.up, 10, "the tail to notice")
        health = await client.get("/health")
        assert health.status_code == 503
        body = health.json()
        assert body["status"] == "degraded" and body["tail"]["up"] is False
        assert body["tail"]["restarts"] == 1
        assert any(why in body["tail"]["last_error"] for why in ("no active connection", "closed database"))
        head = body["tail"]["head"]

        refused = await client.post("/models/load", json={"model": "tiny"})
        assert refused.status_code == 503
        assert refused.json()["type"] == "/problems/state_unavailable"
        assert refused.headers["retry-after"] == "1"

        await _until(lambda: live.up, 30, "the tail to come back")
        recovered = await client.get("/health")
        assert recovered.status_code == 200 and recovered.json()["tail"]["lag_events"] == 0
        assert recovered.json()["tail"]["head"] == head  # the refused command wrote nothing
        loaded = await client.post("/models/load", json={"model": "tiny"})
        assert loaded.status_code == 200, loaded.text


async def test_wait_for_raises_on_timeout(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    async with AsyncTestClient(app=create_app(settings)) as client:
        live: LiveState = client.app.state.runtime.live
        with pytest.raises(StateUnavailable, match="did not reach position"):
            client.blocking_portal.call(live.wait_for, live.position + 1000, 0.05)
