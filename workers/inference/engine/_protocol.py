"""The one interface of an inference engine, as the worker and its HTTP front use it.

Two engines implement it: the batch engine (``n_parallel`` slots over llama.cpp's
C API, requests run on their HTTP threads through a request front) and the
legacy engine (``llama_cpp.Llama``, one request at a time on its own thread,
pooled embeddings). Callers ask an engine what it can do (:attr:`Engine.monitor`,
:attr:`Engine.has_front`, :attr:`Engine.embedding_enabled`) instead of asking
which engine it is.

The batch engine and its front meet at two small protocols: the engine hands a
:class:`Job` to a :class:`JobRunner` (the front, on
the HTTP thread), and the front queues :class:`Request` s on a
:class:`RequestQueue` (the engine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from workers.inference.engine._embed import EmbedRequest
    from workers.inference.engine._job import Job
    from workers.inference.engine._slots import Request
    from workers.inference.engine._views import EngineStats, Heartbeat, SlotView, Step
    from workers.inference.llama import LlamaModel, Loaded


class JobRunner(Protocol):
    """Runs a job on the calling (HTTP) thread: renders, tokenizes, queues, then attaches the results."""

    def run_job(self, job: Job) -> None: ...


class RequestQueue(Protocol):
    """What a request front needs of its engine."""

    def enqueue(self, req: Request) -> None:
        """Queue ``req`` for the next step (raises :class:`EngineNotReady`)."""
        ...

    def cancel(self, req: Request) -> None:
        """Cancel ``req``: it leaves its slot, or the queue, at the next step."""
        ...

    def enqueue_embedding(self, reqs: list[EmbedRequest]) -> None:
        """Queue sequences to embed or score (raises :class:`EngineNotReady`)."""
        ...

    @property
    def embedding_enabled(self) -> bool:
        """Whether the model's own context pools embeddings (``--embedding``)."""
        ...

    @property
    def slot_count(self) -> int:
        """Requests it runs at once (``n_cmpl`` may ask for up to this many completions)."""
        ...

    @property
    def embedding_batch_limit(self) -> int:
        """The most tokens one embedding sequence may have."""
        ...


FrontFactory = Callable[["RequestQueue", "LlamaModel"], JobRunner]
"""Builds an engine's request front once its model is loaded (on the engine thread)."""


class EngineMonitor(Protocol):
    """An engine's live state: ``GET /slots``, ``/engine/steps``, ``/metrics`` and ``instance_stats``."""

    def slots_json(self) -> list[SlotView]: ...

    def steps_json(self) -> list[Step]: ...

    def metrics_text(self) -> str: ...

    def stats(self) -> EngineStats: ...


class Engine(Protocol):
    """Loads a model on its own thread, serves jobs, drains on stop."""

    @property
    def embedding_enabled(self) -> bool:
        """Whether ``/v1/embeddings`` is served."""
        ...

    @property
    def slot_count(self) -> int:
        """Requests it runs at once (known once loaded)."""
        ...

    @property
    def monitor(self) -> EngineMonitor | None:
        """Its live state; None for an engine that keeps none."""
        ...

    @property
    def has_front(self) -> bool:
        """Whether its requests go through a request front (``make_front``), which also serves
        llama-server's own endpoints; False: the engine runs requests itself."""
        ...

    def start(
        self,
        load: Callable[[], Loaded],
        on_loaded: Callable[[Loaded], bool],
        on_failed: Callable[[BaseException], None],
        make_front: FrontFactory,
    ) -> None:
        """Run ``load()`` on the engine thread, then serve.

        ``on_loaded(result)`` returns False if the worker is stopping, in which
        case no job is ever served; ``make_front`` is called first, for an engine
        that :attr:`has_front`. Both callbacks run on the engine thread."""
        ...

    def submit(self, job: Job) -> None:
        """Run ``job``; raises :class:`EngineNotReady` before load and once draining."""
        ...

    def drain(self, grace_s: float) -> None:
        """Stop accepting, turn queued jobs away, give running ones ``grace_s`` seconds, then cancel them."""
        ...

    def cancel_running(self) -> None:
        """End whatever runs now (a second stop request); safe in a signal handler (no locks)."""
        ...

    def heartbeat(self) -> Heartbeat:
        """Its progress for the service's liveness check (``GET /engine/heartbeat``), without a lock."""
        ...
