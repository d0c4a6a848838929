"""What a sleeping model's worker last answered on ``/props`` and ``/metrics``.

llama-server keeps serving ``GET /props`` (``is_sleeping: true``) and ``GET
/metrics`` while it sleeps, from what it cached on entering sleep, and
neither wakes it (``server-context.cpp``: ``cached_props``,
``cached_metrics``). Here a sleeping model has no worker (the sleep stopped
it: :mod:`service.core.instance_lifecycle`), so the service asks the worker
for both just before it stops it, and answers them while the model sleeps.

A cache, not state: nothing is decided from it, and a service restarted
while a model sleeps has none; ``/props`` then answers what the log knows
(:func:`service.api.views.sleeping_props`), ``/metrics`` the router's series.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import structlog

_log = structlog.get_logger(__name__)
_TIMEOUT = 2.0  # seconds per read: a worker that does not answer at once still goes to sleep


class SleepSnapshots:
    """The last ``/props`` (as JSON) and ``/metrics`` (as text) of each model that went to sleep."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http
        # Any: the worker's /props object, as it sent it (llama-server's shape, passed on).
        self._props: dict[str, dict[str, Any]] = {}
        self._metrics: dict[str, bytes] = {}

    async def take(self, model: str, endpoint: str) -> None:
        """Read the worker's ``/props`` and ``/metrics`` before it stops (failures are logged, not raised)."""
        try:
            props = await self._http.get(f"{endpoint}/props", timeout=_TIMEOUT)
            metrics = await self._http.get(f"{endpoint}/metrics", timeout=_TIMEOUT)
            if props.status_code == 200:
                self._props[model] = {**json.loads(props.content), "is_sleeping": True}
        except (httpx.HTTPError, ValueError) as exc:
            _log.warning("sleep_snapshot_failed", model=model, error=type(exc).__name__)
            return
        if metrics.status_code == 200:
            self._metrics[model] = metrics.content

    # Any: as the stored /props object.
    def props(self, model: str) -> dict[str, Any] | None:
        """The model's ``/props`` as it was when it went to sleep (``is_sleeping: true``), if read."""
        return self._props.get(model)

    def metrics(self, model: str) -> bytes | None:
        """The model's ``/metrics`` text as it was when it went to sleep, if read."""
        return self._metrics.get(model)

    def scrape(self, model: str) -> bytes | None:
        """A scrape of the sleeping model: its ``/metrics`` text as it went to sleep, and the rate
        gauges (averaged over the window since the previous scrape) 0 for the next scrapes, since
        nothing runs while it sleeps: llama-server's ``cached_metrics.reset_bucket()``."""
        text = self._metrics.get(model)
        if text is not None:
            self._metrics[model] = _window_emptied(text)
        return text


_WINDOW_GAUGES = (b"llamacpp:prompt_tokens_seconds ", b"llamacpp:predicted_tokens_seconds ")
"""llama-server's two gauges read from the buckets each scrape empties (``server_metrics::reset_bucket``)."""


def _window_emptied(text: bytes) -> bytes:
    lines = text.split(b"\n")
    return b"\n".join(line.split(b" ")[0] + b" 0" if line.startswith(_WINDOW_GAUGES) else line for line in lines)
