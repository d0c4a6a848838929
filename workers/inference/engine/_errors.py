"""What can go wrong with a request inside an engine, in the engine's own terms.

The engine knows no HTTP: it raises (or delivers on a request's queue) one of
these, and the HTTP front answers each with its status and error type
(``workers.inference.http._errors.answer_for``)::

    EngineError
    ├── EngineNotReady     the engine does not accept requests: still loading, or draining
    ├── EngineStopping     the worker is stopping: a queued request is turned away
    ├── RequestCancelled   the client hung up, or a stop outlived its grace period
    ├── RequestRejected    the model cannot run this request as asked (too long, no embeddings)
    └── EngineFailed       inference itself failed (llama_decode's error, a bug in a step)
"""

from __future__ import annotations


class EngineError(Exception):
    """A request the engine could not serve; ``message`` says why, for the client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EngineNotReady(EngineError):
    """Submitted before the engine accepts requests, or after it stopped accepting them."""

    def __init__(self, message: str = "model is not ready (loading or stopping)") -> None:
        super().__init__(message)


class EngineStopping(EngineError):
    """Still queued when the worker began to stop: it never started."""

    def __init__(self, message: str = "worker is stopping") -> None:
        super().__init__(message)


class RequestCancelled(EngineError):
    """Ended by a cancel: its client hung up, or a stop cancelled whatever ran."""


class RequestRejected(EngineError):
    """The model refused the request as asked (its context is too small, it has no embeddings)."""


class EngineFailed(EngineError):
    """Inference failed for every request in the step (``llama_decode`` failed, or a bug)."""
