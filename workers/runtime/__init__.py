"""The worker runtime both workers share: identity, typed emit, parent, control, log.

* :class:`WorkerRuntime` (``_worker_runtime``): one per worker process; typed
  ``emit`` checked against its :class:`WorkerKind` (:data:`DOWNLOAD_WORKER`,
  :data:`INFERENCE_WORKER`), the stdin line protocol, the process start time.
* Event sinks (``_event_sinks``): the event store (:class:`StoreSink`), or JSON
  lines (:class:`JsonlSink`, read back by :func:`read_jsonl`).
* :class:`WorkerLog` (``_log``): JSON lines on a private ``dup`` of stderr, secrets redacted.
* :class:`Parent` (``_parent_watch``): dying with the service (``PR_SET_PDEATHSIG``
  and stdin EOF); :class:`Wakeup` (``_wakeup``): no signal lost before a blocking call.

Exports load lazily: ``python -m workers.download`` installs its signal handlers
before anything slow is imported, and those need only :class:`Parent` and
:class:`Wakeup`, not the event classes and the store writer behind
:class:`WorkerRuntime` (~70 ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers import lazy_exports

if TYPE_CHECKING:  # the real types for mypy; at run time each name loads on first use (__getattr__)
    from workers.runtime._event_sinks import EventSink, JsonlSink, StoreSink, open_sink, parse_jsonl, read_jsonl
    from workers.runtime._log import WorkerLog
    from workers.runtime._parent_watch import (
        MAIN_THREAD_SIGNALS,
        Parent,
        set_parent_death_signal,
        stdin_is_watchable,
        watch_stdin,
    )
    from workers.runtime._wakeup import Wakeup
    from workers.runtime._worker_runtime import (
        DOWNLOAD_WORKER,
        INFERENCE_WORKER,
        WORKER_KINDS,
        WorkerKind,
        WorkerRuntime,
        worker_secrets,
    )

__all__ = [
    "DOWNLOAD_WORKER",
    "INFERENCE_WORKER",
    "MAIN_THREAD_SIGNALS",
    "WORKER_KINDS",
    "EventSink",
    "JsonlSink",
    "Parent",
    "StoreSink",
    "Wakeup",
    "WorkerKind",
    "WorkerLog",
    "WorkerRuntime",
    "open_sink",
    "parse_jsonl",
    "read_jsonl",
    "set_parent_death_signal",
    "stdin_is_watchable",
    "watch_stdin",
    "worker_secrets",
]

_HOMES = {
    "DOWNLOAD_WORKER": "workers.runtime._worker_runtime",
    "INFERENCE_WORKER": "workers.runtime._worker_runtime",
    "WORKER_KINDS": "workers.runtime._worker_runtime",
    "WorkerKind": "workers.runtime._worker_runtime",
    "WorkerRuntime": "workers.runtime._worker_runtime",
    "worker_secrets": "workers.runtime._worker_runtime",
    "EventSink": "workers.runtime._event_sinks",
    "JsonlSink": "workers.runtime._event_sinks",
    "StoreSink": "workers.runtime._event_sinks",
    "open_sink": "workers.runtime._event_sinks",
    "parse_jsonl": "workers.runtime._event_sinks",
    "read_jsonl": "workers.runtime._event_sinks",
    "WorkerLog": "workers.runtime._log",
    "MAIN_THREAD_SIGNALS": "workers.runtime._parent_watch",
    "Parent": "workers.runtime._parent_watch",
    "set_parent_death_signal": "workers.runtime._parent_watch",
    "stdin_is_watchable": "workers.runtime._parent_watch",
    "watch_stdin": "workers.runtime._parent_watch",
    "Wakeup": "workers.runtime._wakeup",
}

__getattr__ = lazy_exports(__name__, _HOMES)
