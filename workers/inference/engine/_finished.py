"""The worker log's line for each finished request, as llama-server prints a request's timings.

Both engines write it (the batch engine in :mod:`._tokens`, the legacy one in :mod:`._legacy`)
through ``on_finished``, which the worker sets to its log's ``info``
(:func:`workers.inference._engine_setup.build_engine`); called on the engine thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

FinishedLog = Callable[..., Any]
"""The worker log's ``info``: ``log("request_finished", **numbers)``."""


def log_finished(
    log: FinishedLog | None, id_task: int, cmpl_id: str, stop: str, timings: Mapping[str, float | int], **info: Any
) -> None:
    """One ``request_finished`` line: the request's ids, how it stopped, the engine's ``info`` (its
    slot, the tokens its cache keeps...) and llama-server's ``timings`` object, flattened."""
    if log is not None:
        log("request_finished", id_task=id_task, cmpl_id=cmpl_id, stop=stop, **info, **timings)
