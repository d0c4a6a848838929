"""The app in-process (``AsyncTestClient(create_app(settings))``): no workers needed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.settings import Settings


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=create_app(settings)) as c:
        yield c
