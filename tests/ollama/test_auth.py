"""The API key on Ollama's routes: as everywhere else, answered in Ollama's error shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.settings import Settings

KEY = "sk-ollama-test-key"


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=create_app(Settings(home=tmp_path / "home", api_keys=(KEY,)))) as c:
        yield c


async def test_a_missing_key_is_ollamas_401_and_the_probe_stays_public(keyed: AsyncTestClient) -> None:
    refused = await keyed.get("/api/tags")
    assert refused.status_code == 401 and refused.json() == {"error": "Invalid API Key"}
    assert refused.headers["content-type"].startswith("application/json")
    allowed = await keyed.get("/api/tags", headers={"Authorization": f"Bearer {KEY}"})
    assert allowed.status_code == 200 and allowed.json() == {"models": []}
    assert (await keyed.get("/")).text == "Ollama is running"
    assert (await keyed.get("/models")).headers["content-type"].startswith("application/problem+json")
