"""The state modelrouter derives from its log: immutable values, no behaviour.

Nothing here is stored as a mutable row; :func:`service.core.fold.fold` builds
these values from events, and the API renders them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, TypedDict, TypeVar, cast

from service.core.devices import NodeDevices, Offload
from service.core.errors import CommandRejected
from service.core.events import JSON, FileRef, ServerMeta
from service.core.keys import NamedKey
from service.core.node_state import Holding, ModelShape, NodeState
from service.core.prompt_cache_state import PromptCacheFile

_T = TypeVar("_T")

_FIELD_NAMES: dict[type, tuple[tuple[str, ...], frozenset[str]]] = {}


# Any: field values of several types; an unknown name is refused, the values are the caller's.
def evolve(obj: _T, **changes: Any) -> _T:
    """``dataclasses.replace`` for these frozen, slotted, validation-free values,
    about twice as fast: the fold calls it several times per event. An unknown
    field name is a ``TypeError`` (a typo must not silently change nothing)."""
    cls = type(obj)
    known = _FIELD_NAMES.get(cls)
    if known is None:
        names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]  # only dataclasses are evolved
        known = _FIELD_NAMES[cls] = (names, frozenset(names))
    if not known[1].issuperset(changes):
        msg = f"{cls.__name__} has no field(s) {sorted(set(changes) - known[1])}"
        raise TypeError(msg)
    new = object.__new__(cls)
    for name in known[0]:
        object.__setattr__(new, name, changes[name] if name in changes else getattr(obj, name))
    return new


class ModelStatus(str, Enum):
    """What a client sees in ``GET /models`` ``status.value``."""

    DOWNLOADING = "downloading"  # a download job is queued or running
    UNLOADED = "unloaded"  # files present, no instance: available to load
    LOADING = "loading"  # an inference worker was requested and is not ready yet
    LOADED = "loaded"  # an inference worker answers requests
    UNLOADING = "unloading"  # a stop was requested, the worker has not exited yet
    UNRESPONSIVE = "unresponsive"  # given up as hung (instance_unresponsive): being killed, then failed
    FAILED = "failed"  # last load/crash/download failed; cleared by the next attempt
    SLEEPING = "sleeping"  # its worker was stopped after --sleep-idle-seconds idle; the next request wakes it
    ABSENT = "absent"  # known to the log but no usable files (cancelled, removed)


class JobStatus(str, Enum):
    """Lifecycle of one download job."""

    QUEUED = "queued"  # requested; worker not yet reporting
    RUNNING = "running"  # worker appended download_started
    CANCELLING = "cancelling"  # cancel requested; worker not yet stopped
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the service died under it; resumable

    @property
    def active(self) -> bool:
        """Whether a worker may be (or should be) moving bytes for this job."""
        return self in _ACTIVE_JOB_STATUSES


_ACTIVE_JOB_STATUSES = frozenset({JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.CANCELLING})


class InstanceStatus(str, Enum):
    """Lifecycle of one inference worker."""

    STARTING = "starting"  # requested by the service; process not yet reporting
    LOADING = "loading"  # worker appended instance_loading
    READY = "ready"
    STOPPING = "stopping"


class FailureKind(str, Enum):
    """What failed: a model's download, its load, or its running worker."""

    DOWNLOAD = "download"
    LOAD = "load"
    CRASH = "crash"


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a model's last download, load or worker failed, as the fold derived it (``last_error``)."""

    kind: FailureKind
    reason: str  # short and stable: "load_timeout", "truncated", "crashed", "http_404", ...
    message: str  # one sentence a person can act on
    at: datetime
    hint: str | None = None  # what to do about it (crashes)
    job_id: str | None = None  # downloads
    retryable: bool | None = None  # downloads
    exit_code: int | None = None  # crashes: the worker's own exit code (None when a signal killed it)
    signal: int | None = None
    signal_name: str | None = None
    status_code: int | None = None  # crashes: the exit status as a shell shows it (128 + signal)
    first_request: bool = False
    max_rss_bytes: int | None = None
    stderr_tail: str = ""

    def to_json(self) -> FailureJSON:
        """The API's ``error`` object: the common fields, then those of its kind."""
        out: dict[str, object] = {
            "kind": self.kind.value,
            "reason": self.reason,
            "message": self.message,
            "at": self.at.isoformat(),
        }
        for name in _FAILURE_FIELDS[self.kind]:
            out[name] = getattr(self, name)
        return cast("FailureJSON", out)


class FailureJSON(TypedDict, total=False):
    """A :class:`Failure` as the API shows it: ``kind``, ``reason``, ``message`` and ``at`` always,
    then the fields of its kind (``_FAILURE_FIELDS``)."""

    kind: str
    reason: str
    message: str
    at: str
    retryable: bool | None
    job_id: str | None
    exit_code: int | None
    signal: int | None
    signal_name: str | None
    status_code: int | None
    hint: str | None
    first_request: bool
    max_rss_bytes: int | None
    stderr_tail: str


_FAILURE_FIELDS = {
    FailureKind.DOWNLOAD: ("retryable", "job_id"),
    FailureKind.LOAD: (),
    FailureKind.CRASH: (
        "exit_code",
        "signal",
        "signal_name",
        "status_code",
        "hint",
        "first_request",
        "max_rss_bytes",
        "stderr_tail",
    ),
}


@dataclass(frozen=True, slots=True)
class DownloadJob:
    job_id: str
    model: str
    status: JobStatus = JobStatus.QUEUED
    repo: str = ""
    revision: str = "main"
    commit: str = ""
    quant: str | None = None
    files: tuple[FileRef, ...] = ()
    bytes_done: int = 0
    bytes_total: int = 0
    bytes_per_second: float | None = None
    eta_seconds: float | None = None
    pid: int | None = None
    pid_started_at: float | None = None
    requested_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: Failure | None = None
    discard_requested: bool = False
    node: str | None = None  # in a cluster: the node whose worker moves the bytes


@dataclass(frozen=True, slots=True)
class EngineStats:
    """The last ``instance_stats`` of an instance (see the event)."""

    slots_total: int
    slots_busy: int
    queue_depth: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    requests_finished: int
    at: datetime


@dataclass(frozen=True, slots=True)
class Instance:
    instance_id: str
    status: InstanceStatus = InstanceStatus.STARTING
    reason: str = "load"
    port: int = 0
    pid: int | None = None
    pid_started_at: float | None = None
    endpoint: str = ""
    params: Mapping[str, JSON] = field(default_factory=dict)  # free-form: launch.Params, as recorded
    progress: float = 0.0
    progress_at: datetime | None = None  # last sign of life while loading: resets the load deadline
    load_ms: float | None = None
    n_ctx: int | None = None
    n_params: int | None = None
    architecture: str | None = None
    model_info: ServerMeta = field(default_factory=dict)  # llama-server's meta, from instance_ready
    requested_at: datetime | None = None
    ready_at: datetime | None = None
    offload: Offload | None = None  # where the worker put the model (instance_ready; None: not said)
    stop_reason: str | None = None
    stats: EngineStats | None = None
    requests_done: int = 0  # request_completed events of this instance
    keep_alive: float | None = None  # the last Ollama keep_alive (s, <0: never); overrides the model's TTL
    node: str | None = None  # in a cluster: the node whose supervisor runs its worker


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The settings in force for one model, as the last ``model_configured`` said."""

    aliases: tuple[str, ...] = ()
    params: Mapping[str, JSON] = field(default_factory=dict)  # free-form: launch.Params, as recorded
    ttl_seconds: float | None = None
    restart: str = "never"
    load_on_startup: bool = False
    args: Mapping[str, JSON] = field(default_factory=dict)  # free-form: llama-server's options as given
    ignored: tuple[str, ...] = ()
    hf_repo: str | None = None  # downloaded on first use when its files are missing
    hf_file: str | None = None
    stop_timeout: float | None = None
    hidden: bool = False  # a cache entry deduplicated by a preset: usable, not listed
    sleep_idle_seconds: float | None = None  # --sleep-idle-seconds: idle this long, the model sleeps
    pinned: bool = False  # never evicted by LRU or memory pressure (preset ``pin = true``)
    hang_timeout: float | None = None  # preset ``hang-timeout``: its worker's liveness bound; None: the global one


@dataclass(frozen=True, slots=True)
class ModelState:
    name: str
    source: str = "cache"
    created_at: datetime | None = None
    available: bool = False
    files: tuple[FileRef, ...] = ()
    path: str | None = None
    size: int = 0
    active_job: str | None = None
    last_job: str | None = None
    jobs: Mapping[str, DownloadJob] = field(default_factory=dict)
    instance: Instance | None = None
    failed: bool = False
    last_error: Failure | None = None
    crash_count: int = 0
    first_request_crashes: int = 0  # crashes in a row on an instance's first request (reset by a completed one)
    last_used: datetime | None = None
    config: ModelConfig = field(default_factory=ModelConfig)
    asleep_since: datetime | None = None  # stopped for sleep (instance_stopped, reason "sleep"), not woken since
    asleep_n_ctx: int | None = None  # the context of the instance that went to sleep, for /props meanwhile
    holders: Mapping[str, Holding] = field(default_factory=dict)  # cluster: node -> its files of the model
    shape: ModelShape | None = None  # the GGUF header's facts for the memory estimate (model_measured)
    added_aliases: tuple[str, ...] = ()  # names given by model_aliased (Ollama's copy); the presets' are config's
    prompt_cache: Mapping[str, PromptCacheFile] = field(default_factory=dict)  # saved files by name (issue 35)
    prompt_cache_restored_tokens: int = 0  # tokens of every prompt_cache_restored, a counter for /metrics

    @property
    def status(self) -> ModelStatus:
        """Derived, never stored: the instance wins, then a download, then files."""
        if self.instance is not None:
            hung = self.instance.stop_reason == UNRESPONSIVE and self.instance.status is InstanceStatus.STOPPING
            return ModelStatus.UNRESPONSIVE if hung else _INSTANCE_TO_MODEL[self.instance.status]
        if self.active_job is not None:
            return ModelStatus.DOWNLOADING
        if self.failed:
            return ModelStatus.FAILED
        if self.asleep_since is not None and self.available:
            return ModelStatus.SLEEPING
        # A preset model with an hf-repo is loadable before its files exist: the
        # first load downloads them (llama.cpp #19351).
        return ModelStatus.UNLOADED if self.available or self.config.hf_repo else ModelStatus.ABSENT

    @property
    def aliases(self) -> tuple[str, ...]:
        """Every other name of the model: its presets' aliases, then those added at run time."""
        return self.config.aliases + self.added_aliases if self.added_aliases else self.config.aliases

    @property
    def listed(self) -> bool:
        """Whether ``GET /models`` shows the model: usable, coming, or worth explaining."""
        return self.status is not ModelStatus.ABSENT

    def replace(self, **changes: Any) -> ModelState:  # Any: as evolve's
        return evolve(self, **changes)


UNRESPONSIVE = "unresponsive"
"""The stop reason of an instance given up as hung (``instance_unresponsive``, then ``instance_stopped``)."""

_INSTANCE_TO_MODEL = {
    InstanceStatus.STARTING: ModelStatus.LOADING,
    InstanceStatus.LOADING: ModelStatus.LOADING,
    InstanceStatus.READY: ModelStatus.LOADED,
    InstanceStatus.STOPPING: ModelStatus.UNLOADING,
}


@dataclass(frozen=True, slots=True)
class RouterState:
    """The whole fold: per-model state plus an index of download jobs."""

    position: int = 0
    models: Mapping[str, ModelState] = field(default_factory=dict)
    job_index: Mapping[str, str] = field(default_factory=dict)
    router_pid: int | None = None
    router_started_at: datetime | None = None
    partial_files: Mapping[str, int] = field(default_factory=dict)
    anomalies: int = 0  # impossible transitions the fold refused to apply (bugs to look at)
    last_anomaly: str | None = None
    nodes: Mapping[str, NodeState] = field(default_factory=dict)  # cluster: the last incarnation of each node
    devices: Mapping[str, NodeDevices] = field(default_factory=dict)  # by node ("": a service without --node)
    keys: Mapping[str, NamedKey] = field(default_factory=dict)  # named API keys by name (issue 34)

    def job(self, job_id: str) -> DownloadJob | None:
        """Look a download job up by id."""
        model = self.job_index.get(job_id)
        return None if model is None else self.models[model].jobs.get(job_id)

    def all_jobs(self) -> list[DownloadJob]:
        """Every download job, oldest request first."""
        jobs = [job for m in self.models.values() for job in m.jobs.values()]
        return sorted(jobs, key=lambda j: (j.requested_at is None, j.requested_at or datetime.min, j.job_id))

    def resolve(self, name_or_alias: str) -> ModelState | None:
        """Find a model by canonical name, alias (a preset's, from ``model_configured``, or one
        added by ``model_aliased``), or ``user/repo`` without its tag when exactly one listed
        ``user/repo:TAG`` exists. Several tags make the short name ambiguous: ``CommandRejected``
        (``conflict``, 409) listing them, never a guess."""
        found = self.models.get(name_or_alias)
        if found is not None:
            return found
        for model in self.models.values():
            if name_or_alias in model.config.aliases:
                return model
        for model in self.models.values():  # after the presets': a reload cannot make a name mean two models
            if name_or_alias in model.added_aliases:
                return model
        if ":" in name_or_alias or name_or_alias.count("/") != 1:
            return None
        prefix = name_or_alias + ":"
        tagged = sorted(name for name, m in self.models.items() if name.startswith(prefix) and m.listed)
        if len(tagged) > 1:
            raise CommandRejected(
                "conflict",
                f"model {name_or_alias!r} is ambiguous: name one of {', '.join(tagged)}",
                model=name_or_alias,
                candidates=tagged,
            )
        return self.models[tagged[0]] if tagged else None
