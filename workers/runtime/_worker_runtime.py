"""The process runtime both workers share: identity, typed emit, parent, control, log.

A worker is a process the service spawns, watches and talks to through three
channels: the event log (what the worker did, in its own words), stdin (line
commands from the service; EOF means the service died) and stderr (JSON log
lines; the service keeps the tail for crash reports). :class:`WorkerRuntime`
owns those channels so that ``workers/download.py`` and
``workers/inference.py`` keep only what differs: their work, their commands
and their exit codes.

* **Typed emit.** ``runtime.emit(ev.InstanceReady(...))``: the same frozen
  classes the core folds, stamped with the worker's model and its source
  (``{"kind", "job_id" | "instance_id", "pid"}``). A worker states only facts
  it owns (house rule 3): an event type outside its :class:`WorkerKind`, or
  about another job or instance, raises :class:`InvalidEvent` before anything
  is written.
* **Parent.** :class:`workers.runtime._parent_watch.Parent`: ``PR_SET_PDEATHSIG`` with
  the ``getppid`` re-check, and stdin EOF.
* **Control.** :meth:`WorkerRuntime.control`: ``<command> [argument]`` lines
  dispatched to the worker's handlers.
* **Log.** :class:`workers.runtime._log.WorkerLog` on a private ``dup`` of stderr,
  ``HF_TOKEN`` redacted.
* **A full log disk** (:mod:`workers.runtime._full_log`): progress is skipped, every other event
  retried until it lands; never a crash.
* **Process start time** (:attr:`WorkerRuntime.started_at`): with the pid it
  identifies this process after pid reuse (the service checks both).

Signals stay with each worker (their meanings differ); both route them
through :mod:`workers.runtime._wakeup` so none is lost before a blocking call.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from service.core import events as ev
from service.core.errors import InvalidEvent
from workers.runtime._event_sinks import EventSink, open_sink
from workers.runtime._full_log import FullLogPolicy
from workers.runtime._log import WorkerLog
from workers.runtime._parent_watch import Parent


@dataclass(frozen=True, slots=True)
class WorkerKind:
    """A kind of worker process: its ``source.kind``, the payload field naming what it
    owns, and the event types it writes (the catalogue's "writer" column, checked)."""

    name: str
    owner_field: str
    events: frozenset[type[ev.Event]]


DOWNLOAD_WORKER = WorkerKind(
    "download_worker",
    "job_id",
    frozenset({ev.DownloadStarted, ev.DownloadProgress, ev.DownloadFinished, ev.DownloadFailed, ev.DownloadCancelled}),
)
INFERENCE_WORKER = WorkerKind(
    "inference_worker",
    "instance_id",
    frozenset(
        {
            ev.InstanceLoading,
            ev.LoadingProgress,
            ev.InstanceReady,
            ev.InstanceStats,
            ev.InstanceLoadFailed,
            ev.InstanceStopped,
            ev.PromptCacheSaved,
            ev.PromptCacheRestored,
            ev.PromptCacheDiscarded,
        }
    ),
)
WORKER_KINDS = (DOWNLOAD_WORKER, INFERENCE_WORKER)


def _node() -> dict[str, str]:
    """``{"node": NAME}`` for a worker of a cluster node (the service sets ``MODELROUTER_NODE``): the
    fold learns from it which node holds a download's files."""
    node = os.environ.get("MODELROUTER_NODE")
    return {"node": node} if node else {}


def worker_secrets(environ: Mapping[str, str] = os.environ) -> tuple[str | None, ...]:
    """Values no worker log line may carry: the Hub token and the database password a worker
    inherits from the service."""
    return (environ.get("HF_TOKEN"), environ.get("PGPASSWORD"))


class WorkerRuntime:
    """One per worker process; see the module docstring."""

    def __init__(
        self, kind: WorkerKind, *, model: str, owner_id: str, sink: EventSink, log: WorkerLog, parent: Parent
    ) -> None:
        self.kind = kind
        self.model = model
        self.owner_id = owner_id
        self.sink = sink
        self.log = log
        self.parent = parent
        self.pid = os.getpid()
        self._full_log = FullLogPolicy(log, parent.gone)

    @classmethod
    def open(
        cls,
        kind: WorkerKind,
        *,
        model: str,
        owner_id: str,
        db: str | None,
        events: str | None,
        parent: Parent | None = None,
        log_level: str = "info",
        private_stdout: bool = False,
    ) -> WorkerRuntime:
        """The runtime for the command line's ``--db`` / ``--events`` and identity.

        ``private_stdout``: JSON lines to stdout go to a ``dup`` of fd 1, for a
        worker whose libraries redirect fd 1 (llama-cpp-python silences it while
        loading, which would swallow ``loading_progress`` lines)."""
        source = {"kind": kind.name, kind.owner_field: owner_id, "pid": os.getpid(), **_node()}
        stdout_fd = os.dup(1) if private_stdout and not db and events in (None, "-") else 1
        sink = open_sink(db, source=source, events_path=events, stdout_fd=stdout_fd)
        log = WorkerLog.to_stderr(
            level=log_level, secrets=worker_secrets(), pid=os.getpid(), model=model, **{kind.owner_field: owner_id}
        )
        return cls(kind, model=model, owner_id=owner_id, sink=sink, log=log, parent=parent or Parent())

    @property
    def source(self) -> ev.EventSource:
        """What the event store records as each event's ``source``."""
        return {"kind": self.kind.name, self.kind.owner_field: self.owner_id, "pid": self.pid, **_node()}

    def emit(self, event: ev.Event) -> None:
        """Record ``event`` for this worker's model; durable when it returns, raises otherwise.
        On a full log disk a progress event is skipped and any other retried until it lands
        (:mod:`workers.runtime._full_log`)."""
        if type(event) not in self.kind.events:
            raise InvalidEvent(event.TYPE, reason=f"a {self.kind.name} does not write {event.TYPE}")
        if getattr(event, self.kind.owner_field) != self.owner_id:
            msg = f"{self.kind.owner_field} is not this worker's {self.owner_id!r}"
            raise InvalidEvent(event.TYPE, reason=msg)
        self._full_log.emit(lambda: self.sink.emit(event, model=self.model), event)

    def control(self, commands: Mapping[str, Callable[[str], None]], *, on_eof: Callable[[], None]) -> bool:
        """Serve the stdin line protocol: ``<command> [argument]``, one per line.

        ``commands`` maps a command word (matched case-insensitively) to a
        handler called with the rest of the line, stripped, on the stdin
        thread; unknown commands are logged and ignored. EOF marks the parent
        gone, then calls ``on_eof``. Returns False (and watches nothing) when
        stdin is not a pipe or socket: EOF there says nothing about the parent."""
        table = {name.lower(): handler for name, handler in commands.items()}

        def on_line(line: str) -> None:
            word, _, rest = line.partition(" ")
            handler = table.get(word.lower())
            if handler is None:
                self.log.warning("unknown_stdin_command", line=line[:200])
            else:
                handler(rest.strip())

        return self.parent.watch_stdin(on_line, on_eof)

    @functools.cached_property
    def started_at(self) -> float | None:
        """This process's start time as psutil reports it (None if unavailable)."""
        try:
            import psutil

            return float(psutil.Process(self.pid).create_time())
        except Exception:  # an optional detail: the service then checks the pid alone
            return None

    def close(self) -> None:
        self.sink.close()
