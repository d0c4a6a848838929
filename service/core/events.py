"""Event types: the vocabulary of the log.

Every fact modelrouter records is one of these frozen dataclasses. Each class has
a stable ``TYPE`` string (never renamed once stored) and a ``VERSION``; older
stored versions are lifted by the upcasters in :mod:`service.core.upcasting`.
The catalogue with field meanings lives in ``docs/event-catalogue.md``.

A field without a default is required: its writer must state it (ids, pids,
paths, sizes, the measurements the event exists to report). A default is kept
only where it is the true common case (``reason="unload"``, ``discard=False``,
``revision="main"``, an optional measurement ``None``), never a placeholder
such as ``""``. Classes are ``kw_only`` so required fields may follow
defaulted ones without reordering the stored payload.

Pure module: stdlib only, no clock, no ids. Callers pass those in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from service.core.errors import InvalidEvent

JSON = Any
"""A JSON-compatible value (dict, list, str, int, float, bool, None)."""


@dataclass(frozen=True, slots=True)
class Event:
    """Base class: a payload with a stable type name and schema version."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    def to_data(self) -> dict[str, JSON]:
        """The JSON payload stored in the ``data`` column."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_data(cls, data: Mapping[str, JSON]) -> Event:
        """Build from a current-version payload that is about to be *written*.

        Strict: an unknown key or a missing required field raises
        :class:`~service.core.errors.InvalidEvent`, so a misspelt field fails
        at the writer instead of vanishing from the log. Reading stored
        payloads is tolerant instead (:func:`service.core.upcasting.decode`)."""
        unknown = sorted(set(data).difference(f.name for f in dataclasses.fields(cls)))
        missing = [name for name in required_fields(cls) if name not in data]
        if unknown or missing:
            raise InvalidEvent(cls.TYPE, unknown=unknown, missing=missing)
        return cls(**{k: _frozen(v) for k, v in data.items()})


def required_fields(cls: type[Event]) -> tuple[str, ...]:
    """The fields of ``cls`` without a default, in declaration order: what every writer must state."""
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def _jsonable(value: Any) -> JSON:
    if isinstance(value, FileRef):
        return value.to_json()
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _frozen(value: Any) -> Any:
    # Lists become tuples so that events compare and hash like values.
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


@dataclass(frozen=True, slots=True)
class FileRef:
    """One model file as the log records it: its path (in the repo, or on disk for a models dir), its
    size and sha256, and once published in an HF cache, its blob and its snapshot link.

    Stored as a JSON object with these keys (the optional ones only when known, as writers always
    wrote them); read tolerantly (a missing key is its default, an unknown one, such as the ``url``
    older logs kept, is ignored)."""

    path: str
    size: int = 0
    sha256: str | None = None
    blob_path: str | None = None
    snapshot_path: str | None = None

    def to_json(self) -> dict[str, JSON]:
        """The stored object."""
        out: dict[str, JSON] = {"path": self.path, "size": self.size}
        for name in ("sha256", "blob_path", "snapshot_path"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def of(cls, value: FileRef | Mapping[str, JSON]) -> FileRef:
        """``value`` as a FileRef (a stored or hand-written object is read tolerantly)."""
        if isinstance(value, FileRef):
            return value
        size, sha, blob, link = (value.get(k) for k in ("size", "sha256", "blob_path", "snapshot_path"))
        return cls(
            path=str(value.get("path") or ""),
            size=int(size or 0),
            sha256=str(sha) if sha else None,
            blob_path=str(blob) if blob else None,
            snapshot_path=str(link) if link else None,
        )

    @property
    def local_path(self) -> str:
        """Where the file is on disk: its snapshot link in an HF cache, else its own path."""
        return self.snapshot_path or self.path


def _files(event: Event) -> None:
    # Events are built by writers (FileRef values) and by readers of stored payloads (JSON objects);
    # either way the field holds FileRefs.
    files = event.files  # type: ignore[attr-defined]  # called only by the classes that have the field
    if any(not isinstance(f, FileRef) for f in files):
        object.__setattr__(event, "files", tuple(FileRef.of(f) for f in files))


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event as stored: its envelope plus the typed payload."""

    position: int
    event_id: str
    model: str | None
    event: Event
    source: Mapping[str, JSON]
    recorded_at: datetime

    @property
    def type(self) -> str:
        """The stable type string of the payload."""
        return self.event.TYPE


# --- router-level -------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterStarted(Event):
    TYPE: ClassVar[str] = "router_started"
    pid: int
    version: str
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterStopped(Event):
    TYPE: ClassVar[str] = "router_stopped"
    pid: int
    reason: str = "shutdown"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryCompleted(Event):
    TYPE: ClassVar[str] = "recovery_completed"
    interrupted_downloads: int
    resumed_downloads: int
    lost_instances: int
    orphans: int
    events_replayed: int
    snapshot_position: int
    duration_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialFileFound(Event):
    TYPE: ClassVar[str] = "partial_file_found"
    path: str
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialFileRemoved(Event):
    """``modelrouter gc`` deleted a partial file that no job refers to."""

    TYPE: ClassVar[str] = "partial_file_removed"
    path: str
    bytes: int


# --- model catalogue ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelDiscovered(Event):
    """A model found on disk (models dir or an existing HF cache), not downloaded by us."""

    TYPE: ClassVar[str] = "model_discovered"
    source: str = "models_dir"
    path: str
    files: tuple[FileRef, ...]
    size: int

    def __post_init__(self) -> None:
        _files(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfigured(Event):
    """Per-model settings (aliases, load params, ttl, restart policy, load-on-startup).

    The llama.cpp-compatible fields (all defaulted, so older rows read as before):
    ``args`` are the llama-server options in force for the model (long names,
    the merge of env, preset ``[*]``, its section and the command line),
    ``ignored`` the ones modelrouter accepted but cannot honour, ``hf_repo``/
    ``hf_file`` where a preset model is downloaded from on first use,
    ``stop_timeout`` the preset's ``stop-timeout``, and ``hidden`` a cache
    entry that ``dedup-cache-models`` keeps out of ``GET /models``."""

    TYPE: ClassVar[str] = "model_configured"
    aliases: tuple[str, ...] = ()
    params: Mapping[str, JSON] = dataclasses.field(default_factory=dict)
    ttl_seconds: float | None = None
    restart: str = "never"
    load_on_startup: bool = False
    args: Mapping[str, JSON] = dataclasses.field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    hf_repo: str | None = None
    hf_file: str | None = None
    stop_timeout: float | None = None
    hidden: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRemoved(Event):
    TYPE: ClassVar[str] = "model_removed"
    files: tuple[str, ...]
    bytes_freed: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelsReloaded(Event):
    """The model sources (presets, models dir, caches) were read again on request
    (``GET /models?reload=1``, ``POST /models/reload``). The per-model facts are
    the ``model_discovered``/``model_configured``/``model_removed`` events recorded
    with it; this one says what the reload changed, by model name."""

    TYPE: ClassVar[str] = "models_reloaded"
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unloaded: tuple[str, ...] = ()


# --- downloads ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadRequested(Event):
    TYPE: ClassVar[str] = "download_requested"
    job_id: str
    repo: str
    revision: str = "main"
    commit: str
    quant: str | None = None
    files: tuple[FileRef, ...]
    total_bytes: int

    def __post_init__(self) -> None:
        _files(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadStarted(Event):
    TYPE: ClassVar[str] = "download_started"
    job_id: str
    pid: int
    commit: str
    files: tuple[FileRef, ...]
    total_bytes: int
    resumed_bytes: int = 0
    pid_started_at: float | None = None

    def __post_init__(self) -> None:
        _files(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadProgress(Event):
    """v2; v1 was ``{job_id, done, total}`` (llama.cpp's shape), see upcasting."""

    TYPE: ClassVar[str] = "download_progress"
    VERSION: ClassVar[int] = 2
    job_id: str
    bytes_done: int
    bytes_total: int
    bytes_per_second: float | None = None
    eta_seconds: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadFinished(Event):
    TYPE: ClassVar[str] = "download_finished"
    job_id: str
    commit: str
    files: tuple[FileRef, ...]
    bytes_total: int
    bytes_transferred: int
    duration_ms: float

    def __post_init__(self) -> None:
        _files(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadFailed(Event):
    TYPE: ClassVar[str] = "download_failed"
    job_id: str
    reason: str = "internal"
    message: str
    retryable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadCancelRequested(Event):
    TYPE: ClassVar[str] = "download_cancel_requested"
    job_id: str
    discard: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadCancelled(Event):
    TYPE: ClassVar[str] = "download_cancelled"
    job_id: str
    discarded: bool = False
    bytes_on_disk: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadInterrupted(Event):
    TYPE: ClassVar[str] = "download_interrupted"
    job_id: str
    bytes_on_disk: int
    reason: str = "router_restart"


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadResumed(Event):
    """The service started a new worker for an interrupted job (same job id)."""

    TYPE: ClassVar[str] = "download_resumed"
    job_id: str
    bytes_on_disk: int


# --- inference instances -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceRequested(Event):
    """The service decided to start an inference worker (load, autoload, restart, startup)."""

    TYPE: ClassVar[str] = "instance_requested"
    instance_id: str
    reason: str = "load"
    port: int
    params: Mapping[str, JSON] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceLoading(Event):
    TYPE: ClassVar[str] = "instance_loading"
    instance_id: str
    pid: int
    endpoint: str
    params: Mapping[str, JSON] = dataclasses.field(default_factory=dict)
    pid_started_at: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadingProgress(Event):
    TYPE: ClassVar[str] = "loading_progress"
    instance_id: str
    progress: float


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceReady(Event):
    TYPE: ClassVar[str] = "instance_ready"
    instance_id: str
    pid: int
    endpoint: str
    load_ms: float
    n_ctx: int
    n_params: int
    file_size: int
    architecture: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceStats(Event):
    """The batch engine's load, appended by its worker when it changed, at most every few seconds.

    Throughputs are llama-server's ``/metrics`` averages over the instance's
    finished requests (prompt tokens evaluated per prefill second, tokens
    generated per decode second); ``slots_busy`` and ``queue_depth`` are the
    moment's."""

    TYPE: ClassVar[str] = "instance_stats"
    instance_id: str
    slots_total: int
    slots_busy: int
    queue_depth: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    requests_finished: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceLoadFailed(Event):
    TYPE: ClassVar[str] = "instance_load_failed"
    instance_id: str
    reason: str = "load_error"
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceStopRequested(Event):
    TYPE: ClassVar[str] = "instance_stop_requested"
    instance_id: str
    reason: str = "unload"


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceStopped(Event):
    TYPE: ClassVar[str] = "instance_stopped"
    instance_id: str
    reason: str = "unload"
    exit_code: int | None = None
    forced: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceCrashed(Event):
    """The worker ended without being asked to. The service observed how (``waitpid``); the fold
    explains it in words (:func:`service.core.exit_reasons.explain_exit`)."""

    TYPE: ClassVar[str] = "instance_crashed"
    instance_id: str
    exit_code: int | None = None
    signal: int | None = None
    stderr_tail: str
    max_rss_bytes: int | None = None  # peak resident memory (wait4's ru_maxrss)
    oom_killed: bool | None = None  # the kernel's OOM kill count rose while it ran (None: not known)
    requests_in_flight: int = 0  # requests the service was proxying to it when it died


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceLost(Event):
    TYPE: ClassVar[str] = "instance_lost"
    instance_id: str
    reason: str = "router_restart"
    killed_survivor: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCompleted(Event):
    """A proxied request finished; drives ``last_used`` for LRU and idle TTL."""

    TYPE: ClassVar[str] = "request_completed"
    instance_id: str
    route: str
    status_code: int
    stream: bool = False
    duration_ms: float


EVENT_TYPES: Mapping[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        RouterStarted,
        RouterStopped,
        RecoveryCompleted,
        PartialFileFound,
        PartialFileRemoved,
        ModelDiscovered,
        ModelConfigured,
        ModelRemoved,
        ModelsReloaded,
        DownloadRequested,
        DownloadStarted,
        DownloadProgress,
        DownloadFinished,
        DownloadFailed,
        DownloadCancelRequested,
        DownloadCancelled,
        DownloadInterrupted,
        DownloadResumed,
        InstanceRequested,
        InstanceLoading,
        LoadingProgress,
        InstanceReady,
        InstanceStats,
        InstanceLoadFailed,
        InstanceStopRequested,
        InstanceStopped,
        InstanceCrashed,
        InstanceLost,
        RequestCompleted,
    )
}
"""Registry: stable type string -> current event class."""
