"""``LLAMA_SERVER_DEBUG_FAKE_TIMING`` is the router's (issue 29 §3): llama-server reads it only in
router mode (``server-models.cpp``), so in single-model mode no load waits and no request is held.
The supervisor runs for real over a real log; its clock records the sleeps it is asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core.server_mode import ROUTER, ServerMode, fake_timing
from tests.supervision.fakes import rig


def test_the_switch_is_the_routers_only() -> None:
    assert fake_timing(ROUTER, True) is True
    assert fake_timing(ServerMode("a"), True) is False
    assert fake_timing(ROUTER, False) is False


@pytest.mark.parametrize(("mode", "slept"), [(ROUTER, [2.0, 2.0]), (ServerMode("a"), [])], ids=["router", "single"])
async def test_a_load_and_a_request_sleep_only_in_router_mode(
    tmp_path: Path, mode: ServerMode, slept: list[float]
) -> None:
    """The load waits 2 s before its worker is spawned, the request holds its model 2 s before it is
    sent, as llama.cpp's router does; the same settings in single-model mode sleep not at all."""
    async with rig(tmp_path, fake_timing=True) as r:
        r.sup.fake_timing = fake_timing(mode, r.sup.settings.fake_timing)  # what start-up decides
        await r.sup.load("a")
        await r.ready("a")
        lease = await r.sup.acquire("a", autoload=False)
        lease.release()
        assert r.clock.slept == slept
