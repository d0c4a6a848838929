"""Event types: the vocabulary of the log.

Every fact modelrouter records is one of these frozen dataclasses. Each class has
a stable ``TYPE`` string (never renamed once stored) and a ``VERSION``; older
stored versions are lifted by the upcasters in :mod:`service.core.upcasting`.
The catalogue with field meanings lives in ``docs/event-catalogue.md``; the base
classes (``Event``, ``Recorded``, ``FileRef``) in :mod:`service.core.event_base`.

A field without a default is required: its writer must state it (ids, pids,
paths, sizes, the measurements the event exists to report). A default is kept
only where it is the true common case (``reason="unload"``, ``discard=False``, ``revision="main"``,
an optional measurement ``None``), never a placeholder such as ``""``. Classes are ``kw_only`` so
required fields may follow defaulted ones without reordering the stored payload. Pure: stdlib only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from service.core.alias_events import ModelAliased as ModelAliased
from service.core.alias_events import ModelAliasRemoved as ModelAliasRemoved
from service.core.devices import Stored
from service.core.download_events import DownloadCancelled as DownloadCancelled
from service.core.download_events import DownloadCancelRequested as DownloadCancelRequested
from service.core.download_events import DownloadFailed as DownloadFailed
from service.core.download_events import DownloadFinished as DownloadFinished
from service.core.download_events import DownloadInterrupted as DownloadInterrupted
from service.core.download_events import DownloadProgress as DownloadProgress
from service.core.download_events import DownloadRequested as DownloadRequested
from service.core.download_events import DownloadResumed as DownloadResumed
from service.core.download_events import DownloadStarted as DownloadStarted
from service.core.event_base import JSON as JSON
from service.core.event_base import Event as Event
from service.core.event_base import EventPayload as EventPayload
from service.core.event_base import EventSource as EventSource
from service.core.event_base import FileRef as FileRef
from service.core.event_base import Recorded as Recorded
from service.core.event_base import ServerMeta as ServerMeta
from service.core.event_base import StoredFile as StoredFile
from service.core.event_base import coerce_files
from service.core.event_base import required_fields as required_fields
from service.core.hang_events import InstanceUnresponsive as InstanceUnresponsive
from service.core.key_events import KeyChanged as KeyChanged
from service.core.key_events import KeyCreated as KeyCreated
from service.core.key_events import KeyRevoked as KeyRevoked
from service.core.launch import InferenceLaunch, Params
from service.core.node_events import ModelMeasured as ModelMeasured
from service.core.node_events import NodeDevicesMeasured as NodeDevicesMeasured
from service.core.node_events import NodeJoined as NodeJoined
from service.core.node_events import NodeLeft as NodeLeft
from service.core.node_events import NodeLost as NodeLost
from service.core.prompt_cache_events import PromptCacheDiscarded as PromptCacheDiscarded
from service.core.prompt_cache_events import PromptCacheRestored as PromptCacheRestored
from service.core.prompt_cache_events import PromptCacheSaved as PromptCacheSaved
from service.core.router_events import LogWritesResumed as LogWritesResumed
from service.core.router_events import PartialFileFound as PartialFileFound
from service.core.router_events import PartialFileRemoved as PartialFileRemoved
from service.core.router_events import RecoveryCompleted as RecoveryCompleted
from service.core.router_events import RouterStarted as RouterStarted
from service.core.router_events import RouterStopped as RouterStopped

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
        coerce_files(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfigured(Event):
    """Per-model settings (aliases, load params, ttl, restart policy, load-on-startup).

    The llama.cpp-compatible fields (all defaulted, so older rows read as before):
    ``args`` are the llama-server options in force for the model (long names,
    the merge of env, preset ``[*]``, its section and the command line),
    ``ignored`` the ones modelrouter accepted but cannot honour, ``hf_repo``/
    ``hf_file`` where a preset model is downloaded from on first use,
    ``stop_timeout`` the preset's ``stop-timeout``, ``hidden`` a cache
    entry that ``dedup-cache-models`` keeps out of ``GET /models``, and
    ``sleep_idle_seconds`` llama-server's ``--sleep-idle-seconds`` (None: never)."""

    TYPE: ClassVar[str] = "model_configured"
    aliases: tuple[str, ...] = ()
    params: Mapping[str, JSON] = dataclasses.field(default_factory=dict)  # free-form: launch.Params
    ttl_seconds: float | None = None
    restart: str = "never"
    load_on_startup: bool = False
    args: Mapping[str, JSON] = dataclasses.field(default_factory=dict)  # free-form: llama-server's options as given
    ignored: tuple[str, ...] = ()
    hf_repo: str | None = None
    hf_file: str | None = None
    stop_timeout: float | None = None
    hidden: bool = False
    sleep_idle_seconds: float | None = None
    pinned: bool = False  # the preset's ``pin = true`` (ours): never evicted by LRU or memory pressure
    hang_timeout: float | None = None  # the preset's ``hang-timeout`` (ours); None: MODELROUTER_HANG_TIMEOUT


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


# --- inference instances -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceRequested(Event):
    """The service decided to start an inference worker (load, autoload, restart, startup); in a
    cluster, on ``node`` (its supervisor spawns it; ``port`` 0: that node picks one)."""

    TYPE: ClassVar[str] = "instance_requested"
    instance_id: str
    reason: str = "load"
    port: int
    params: Params = dataclasses.field(default_factory=dict)  # the launch, as the model's parameters
    node: str | None = None

    @property
    def launch(self) -> InferenceLaunch:
        """The worker's launch: the typed reading of ``params`` (its unknown keys left out)."""
        return InferenceLaunch.from_params(self.params)


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceLoading(Event):
    TYPE: ClassVar[str] = "instance_loading"
    instance_id: str
    pid: int
    endpoint: str
    params: Mapping[str, JSON] = dataclasses.field(default_factory=dict)  # free-form: launch.Params
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
    model_info: ServerMeta = dataclasses.field(default_factory=dict)  # llama-server's meta (catalogue)
    log_path: str | None = None  # the file the service keeps the worker's lines in (None: logged before issue 37)
    offload: Stored | None = None  # service.core.devices.Offload's JSON (None: logged before issue 31)


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
class SleepEnded(Event):
    """A sleeping model (its worker stopped with reason ``sleep``) was unloaded without being
    woken: it is an ordinary unloaded model again, which a request no longer wakes when autoload is
    off. A wake needs no event of its own: the next ``instance_requested`` (reason ``wake``) ends the sleep."""

    TYPE: ClassVar[str] = "sleep_ended"
    reason: str = "unload"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCompleted(Event):
    """A proxied request finished; drives ``last_used`` for LRU and idle TTL."""

    TYPE: ClassVar[str] = "request_completed"
    instance_id: str
    route: str
    status_code: int
    stream: bool = False
    duration_ms: float
    keep_alive: float | None = None  # Ollama's per-request idle limit in seconds (<0: never); None: the model's TTL
    key: str | None = None  # the caller (a named key, ``api-key``: a full key, ``anonymous``); None: older logs
    prompt_tokens: int | None = None  # llama-server's count (cached ones included); None: not stated
    completion_tokens: int | None = None


EVENT_TYPES: Mapping[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        RouterStarted,
        RouterStopped,
        RecoveryCompleted,
        PartialFileFound,
        PartialFileRemoved,
        ModelDiscovered,
        LogWritesResumed,
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
        SleepEnded,
        RequestCompleted,
        InstanceUnresponsive,
        NodeJoined,
        NodeDevicesMeasured,
        NodeLost,
        NodeLeft,
        ModelMeasured,
        PromptCacheSaved,
        PromptCacheRestored,
        PromptCacheDiscarded,
        ModelAliased,
        ModelAliasRemoved,
        KeyCreated,
        KeyChanged,
        KeyRevoked,
    )
}
"""Registry: stable type string -> current event class."""
