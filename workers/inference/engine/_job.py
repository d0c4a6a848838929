"""A job: one HTTP request (chat, completion or embedding) as an engine receives it.

The HTTP thread builds it from the validated request and hands it to
``Engine.submit``; its results come back through :meth:`Job.results`, on the
HTTP thread, whichever engine ran it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from workers.inference.engine._errors import RequestCancelled

END = object()
"""Put on a job's ``out`` queue after its last result (the legacy engine's way of saying done)."""


class Job:
    """One request: what to run, and how its results reach the HTTP thread.

    The legacy engine feeds ``out`` (response dicts, an exception, then
    ``END``); the batch engine's front instead attaches an iterator that
    it runs on the HTTP thread itself. Either way :meth:`results` yields
    dicts, and while it waits it checks ``client_gone`` every ``POLL_S``
    so a hung-up client cancels its work, even before the first token.
    """

    POLL_S = 0.05

    def __init__(
        self, kind: str, kwargs: dict[str, Any], *, stream: bool = False, options: dict[str, Any] | None = None
    ) -> None:
        self.kind = kind  # "chat" | "completion" | "embedding"
        self.kwargs = kwargs
        self.stream = stream
        self.options = options or {}  # cache_prompt, include_usage: batch engine only
        self.out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self.enqueued_at = time.monotonic()
        self.started_at: float | None = None
        self.client_gone: Callable[[], bool] | None = None
        self._attached: Iterator[Any] | None = None

    def attach(self, results: Iterator[Any]) -> None:
        self._attached = results

    def results(self) -> Iterator[Any]:
        """Yield result dicts in order; re-raise a job error in the caller's thread."""
        if self._attached is not None:
            try:
                yield from self._attached
            finally:
                close = getattr(self._attached, "close", None)
                if close is not None:
                    close()  # an abandoned stream cancels its engine request
            return
        while True:
            try:
                item = self.out.get(timeout=self.POLL_S)
            except queue.Empty:
                if self.client_gone is not None and self.client_gone():
                    self.cancel()
                    raise RequestCancelled("client disconnected") from None
                continue
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def cancel(self) -> None:
        self.cancelled.set()
        if self._attached is not None:
            close = getattr(self._attached, "close", None)
            if close is not None:
                close()
