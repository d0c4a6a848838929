"""A supervisor's outside world (:mod:`service.supervision.surroundings`): its defaults are the real one
(a real process, a real port, the system clock, fresh ids). How ``LoggedSpawn`` names each worker's file
is tested with the logs it writes, in ``test_worker_logs.py``."""

from __future__ import annotations

import socket
import sys
from datetime import UTC

from service.supervision.child_process import ChildProcess
from service.supervision.surroundings import Surroundings


async def test_the_default_surroundings_are_the_real_world() -> None:
    fx = Surroundings()
    child = await fx.spawn([sys.executable, "-c", "raise SystemExit(7)"], name="test:real")
    assert isinstance(child, ChildProcess) and (await child.wait()).exit_code == 7
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", fx.free_port()))
    before = fx.clock.monotonic()
    await fx.clock.sleep(0.01)
    assert fx.clock.monotonic() >= before + 0.01 and fx.clock.now().tzinfo is UTC
    assert len({fx.new_id() for _ in range(100)}) == 100 and len({fx.new_job_id() for _ in range(100)}) == 100
    assert 0.0 <= fx.jitter() < 1.0 and fx.heartbeat is None  # None: heartbeats go over HTTP
