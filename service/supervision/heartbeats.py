"""The heartbeats of the ready local workers: what :func:`service.core.instance_hangs.decide_liveness` reads.

Each planning pass hands :meth:`Heartbeats.watch` the ready workers of this node; each one is asked
``GET /engine/heartbeat`` at most once per :data:`~service.core.liveness.HEARTBEAT_S` while requests
are in flight to it, else once per :data:`~service.core.liveness.IDLE_HEARTBEAT_S`, with at most
one question out at a time (a stopped worker's question waits out its timeout, and its silence
grows meanwhile). Its answer (the engine's step counter, how long the step in progress has run)
becomes its :class:`~service.core.liveness.Beat`. A question that fails or times out changes
nothing: the silence is measured from the last answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Mapping
from typing import Any

import httpx

from service.core.liveness import HEARTBEAT_S, IDLE_HEARTBEAT_S, Beat, first_beat, heard
from service.outside.hop_client import hop_client
from service.supervision.surroundings import Clock, Probe

PROBE_TIMEOUT_S = 5.0  # one question's limit; the hang bound is judged from the last answer, not from this


class Heartbeats:
    """The last beat of each watched worker, by instance id."""

    def __init__(self, clock: Clock, probe: Probe | None = None, auth: httpx.Auth | None = None) -> None:
        self.beats: dict[str, Beat] = {}
        self._auth = auth  # signs each question with the worker's secret (service.supervision.worker_keys)
        self._clock = clock
        self._probe = probe or self._ask_http
        self._client: httpx.AsyncClient | None = None
        self._asked_at: dict[str, float] = {}
        self._out: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    def watch(self, endpoints: Mapping[str, str], busy: Collection[str] = ()) -> None:
        """Watch exactly these workers (instance id -> endpoint): forget the others, ask each one that is
        due: every :data:`HEARTBEAT_S` while requests are in flight to its endpoint (``busy``), else
        every :data:`IDLE_HEARTBEAT_S`."""
        if self._closed:
            return  # shutting down: a last planning pass asks nothing
        for gone in set(self.beats) - set(endpoints):
            self.beats.pop(gone, None)
            self._asked_at.pop(gone, None)
        now = self._clock.monotonic()
        for instance_id, endpoint in endpoints.items():
            self.beats.setdefault(instance_id, first_beat(now))
            every = HEARTBEAT_S if endpoint in busy else IDLE_HEARTBEAT_S
            due = now - self._asked_at.get(instance_id, float("-inf")) >= every
            if due and instance_id not in self._out:
                self._asked_at[instance_id] = now
                task = asyncio.create_task(self._ask(instance_id, endpoint), name=f"heartbeat-{instance_id}")
                self._out[instance_id] = task

    async def _ask(self, instance_id: str, endpoint: str) -> None:
        try:
            answer = await self._probe(endpoint, PROBE_TIMEOUT_S)
        finally:
            self._out.pop(instance_id, None)
        last = self.beats.get(instance_id)
        if answer is None or last is None:
            return  # no answer, or no longer watched
        step_s, steps, waiting = answer.get("step_s"), int(answer.get("steps") or 0), int(answer.get("waiting") or 0)
        running = float(step_s) if step_s is not None else None
        self.beats[instance_id] = heard(last, self._clock.monotonic(), steps, running, waiting)

    # The worker's heartbeat JSON, read field by field (and checked) by the hang watch.
    async def _ask_http(self, endpoint: str, timeout: float) -> Mapping[str, Any] | None:
        if self._client is None:  # its own pool: a proxy pool full of long answers must not hold heartbeats back
            self._client = hop_client(httpx.Timeout(timeout), httpx.Limits(), auth=self._auth)
        try:
            answer = await self._client.get(endpoint + "/engine/heartbeat")
            body = answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    async def close(self) -> None:
        """Cancel the questions out and close the HTTP client (shut-down)."""
        self._closed = True
        for task in list(self._out.values()):
            task.cancel()
        await asyncio.gather(*self._out.values(), return_exceptions=True)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
