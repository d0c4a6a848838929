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
IDLE = object()
"""What :meth:`Watched.get` gives when no result came within its interval."""


class RequesterLeft(Exception):
    """The client hung up (or, for a resumable stream, ``DELETE /v1/stream`` ended it)."""


class Watched:
    """A result queue read with an eye on whether its requester left.

    ``gone`` is asked at once when no result came within ``every`` seconds, and at most every
    ``every`` seconds while results flow. Why both: a stream whose tokens never pause (a tiny model,
    a context that shifts) never left its queue empty, so a check made only when idle never ran and a
    hang-up or a ``DELETE /v1/stream`` went unnoticed until the generation ended by itself; asking on
    every token would cost a syscall each.
    """

    def __init__(self, out: queue.SimpleQueue[Any], gone: Callable[[], bool] | None, every: float) -> None:
        self._out, self._gone, self._every = out, gone, every
        self._due = time.monotonic() + every

    def get(self) -> Any:
        """The next result, or :data:`IDLE`; raises :class:`RequesterLeft` once the requester left."""
        try:
            item = self._out.get(timeout=self._every)
        except queue.Empty:
            item = IDLE
        if self._gone is not None and (item is IDLE or time.monotonic() >= self._due):
            self._due = time.monotonic() + self._every
            if self._gone():
                raise RequesterLeft
        return item


JobArgs = dict[str, Any]
"""A job's keyword arguments (``llama_cpp.Llama``'s ``create_*`` ones, which the batch engine reads by the
same names) and its ``options`` (``cache_prompt``, ``include_usage``, ``lora``): free-form, built by the
dialect that took the request, and read by name on the engine thread."""


class Job:
    """One request: what to run, and how its results reach the HTTP thread.

    The legacy engine feeds ``out`` (response dicts, an exception, then
    ``END``); the batch engine's front instead attaches an iterator that
    it runs on the HTTP thread itself. Either way :meth:`results` yields
    dicts, and it checks ``client_gone`` every ``POLL_S`` (:class:`Watched`)
    so a hung-up client cancels its work, before the first token or mid-stream.
    """

    POLL_S = 0.05

    def __init__(self, kind: str, kwargs: JobArgs, *, stream: bool = False, options: JobArgs | None = None) -> None:
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
        watched = Watched(self.out, self.client_gone, self.POLL_S)
        while True:
            try:
                item = watched.get()
            except RequesterLeft:
                self.cancel()
                raise RequestCancelled("client disconnected") from None
            if item is IDLE:
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
