"""The inference worker: one process per loaded model (``python -m workers.inference``, see ``_cli``).

* ``_cli``: the command line, the stdin protocol, the exit codes.
* ``_worker``: the process's lifecycle (bind, load, serve, stop), driven by signals and stdin.
* ``_lifecycle``: the worker's states and their transition table.
* ``_engine_setup``: which engine runs, and how it loads, decided once.
* :mod:`workers.inference.engine`: the engines (batch, legacy) behind one protocol.
* :mod:`workers.inference.llama`: llama.cpp through llama-cpp-python: loading, GGUF checks, tokenizing.
* :mod:`workers.inference.http`: the HTTP server, the OpenAI and llama-server routes, the request front.

Exports load lazily: ``python -m workers.inference`` imports this package before
its ``__main__`` records early stop signals, so nothing slow may load here (plain imports:
~180 ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers import lazy_exports

if TYPE_CHECKING:  # the real types for mypy; at run time each name loads on first use (__getattr__)
    from workers.inference._lifecycle import WORKER_LIFECYCLE, Trigger, WorkerState, next_state
    from workers.inference._worker import main

__all__ = ["WORKER_LIFECYCLE", "Trigger", "WorkerState", "main", "next_state"]

_HOMES = {
    "WORKER_LIFECYCLE": "workers.inference._lifecycle",
    "Trigger": "workers.inference._lifecycle",
    "WorkerState": "workers.inference._lifecycle",
    "next_state": "workers.inference._lifecycle",
    "main": "workers.inference._worker",
}

__getattr__ = lazy_exports(__name__, _HOMES)
