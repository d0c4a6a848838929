"""The dashboard's files and its key handling, in-process (the browser test is
tests/api/test_dashboard.py): served without a key, the stream's ``?api_key=``
accepted only on the event streams, and the page's list of event types kept equal
to the log's (EventSource hears a named message only with a listener for its name)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from litestar.testing import AsyncTestClient

from devtools.service_process import ServiceProcess
from service.api.controllers import STATIC
from service.app import create_app
from service.core import events as ev
from service.settings import Settings

KEY = "sk-assets-test-0123456789"


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=create_app(Settings(home=tmp_path / "home", api_keys=(KEY,)))) as c:
        yield c


def test_the_page_listens_for_every_event_type() -> None:
    source = (STATIC / "dashboard.js").read_text()
    listed = re.search(r"const EVENT_TYPES = (\[.*?\]);", source, re.S)
    assert listed, "EVENT_TYPES not found in dashboard.js"
    assert json.loads(listed.group(1).replace("\n", "").replace(",]", "]")) == sorted(ev.EVENT_TYPES)


async def test_the_files_are_public_and_the_data_is_not(keyed: AsyncTestClient) -> None:
    page = await keyed.get("/", headers={"accept": "text/html"})  # as a browser asks
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/dashboard/dashboard.js" in page.text
    for name, kind in (("dashboard.js", "javascript"), ("dashboard.css", "text/css")):
        asset = await keyed.get(f"/dashboard/{name}")
        assert asset.status_code == 200 and kind in asset.headers["content-type"]
    assert (await keyed.get("/models")).status_code == 401
    assert (await keyed.get("/metrics")).status_code == 401


async def test_api_key_in_the_query_opens_only_the_event_streams(keyed: AsyncTestClient) -> None:
    assert (await keyed.get("/events/stream", params={"after": 0, "api_key": "wrong"})).status_code == 401
    assert (await keyed.get("/models/sse", params={"api_key": KEY[:-1]})).status_code == 401
    # A key in a URL leaks into logs and history: no other route takes one.
    for path in ("/models", "/events", "/metrics", "/downloads"):
        assert (await keyed.get(path, params={"api_key": KEY})).status_code == 401, path


@pytest.mark.timeout(60)
def test_the_right_key_in_the_query_opens_the_stream(tmp_path: Path) -> None:
    with (
        ServiceProcess(tmp_path / "home", args=["--api-key", KEY]) as svc,
        httpx.stream("GET", f"{svc.url}/events/stream", params={"after": 0, "api_key": KEY}, timeout=30) as stream,
    ):
        assert stream.status_code == 200
        first = next(line for line in stream.iter_lines() if line.startswith("event:"))
        assert first == "event: router_started"
