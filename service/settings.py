"""Typed settings, read once in ``main`` (never at import) from env and CLI flags."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from service.core.booleans import parse_bool
from service.core.liveness import DEFAULT_HANG_TIMEOUT
from service.core.memory import parse_margin
from service.event_store.urls import check_url, is_postgres, redacted, sqlite_path, without_password


def _default_home() -> Path:
    return Path(os.path.expanduser("~/.local/share/modelrouter"))


def _bool(text: str) -> bool:
    return parse_bool(text, empty=False)


SECRET_FIELDS = ("hf_token", "api_keys")
"""Fields never shown: ``repr(settings)`` redacts them, and the log redacts their values."""


@dataclass(frozen=True, slots=True, repr=False)
class Settings:
    home: Path = dataclasses.field(default_factory=_default_home)
    """Data directory (MODELROUTER_HOME): the database, the hub cache, logs."""
    host: str = "127.0.0.1"
    """Bind addresses (MODELROUTER_HOST, --host): comma-separated, as llama-server takes them, each one
    bound (``127.0.0.1,::1``; a path ending in ``.sock`` is a UNIX socket). Loopback by default; beyond
    it, set api_keys (an open bind without a key is warned about at start and on /health)."""
    port: int = 8080
    """Bind port (MODELROUTER_PORT)."""
    database_url: str = ""
    """The event log (MODELROUTER_DATABASE_URL, --database-url): ``sqlite:///PATH`` (default
    ``<home>/modelrouter.db``) or ``postgresql://user@host/db`` (docs/operations.md)."""
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    """SQLite synchronous level (MODELROUTER_SYNCHRONOUS). FULL survives power loss."""
    hub_cache: Path | None = None
    """HF cache for downloads (MODELROUTER_HUB_CACHE, --hub-cache); default LLAMA_CACHE when set
    (llama.cpp downloads there), else ``<home>/hub``. Point it at ``~/.cache/huggingface/hub``
    to share files with ``hf`` and llama.cpp both ways."""
    models_dir: Path | None = None
    """Optional directory of local GGUF files (MODELROUTER_MODELS_DIR)."""
    presets: Path | None = None
    """Optional INI file of per-model settings (MODELROUTER_PRESETS); see service/llamacpp/presets.py."""
    hf_endpoint: str = "https://huggingface.co"
    """Hub endpoint (HF_ENDPOINT)."""
    hf_token: str | None = None
    """Hub token (HF_TOKEN)."""
    models_max: int = 4
    """Loaded models at once (MODELROUTER_MODELS_MAX); 0 = unlimited. Downloads never count."""
    autoload: bool = True
    """Load an unloaded model on its first request (MODELROUTER_AUTOLOAD)."""
    load_timeout: float = 300.0
    """Seconds to wait for instance_ready; reset by each loading_progress (MODELROUTER_LOAD_TIMEOUT)."""
    stop_timeout: float = 10.0
    """Seconds between SIGTERM and SIGKILL when stopping a worker (MODELROUTER_STOP_TIMEOUT)."""
    hang_timeout: float = DEFAULT_HANG_TIMEOUT
    """Seconds one engine step may last before its worker is given up as hung, killed and its requests
    answered 503; a worker that does not answer its heartbeat for this long (or 30 s, if shorter) is too
    (MODELROUTER_HANG_TIMEOUT, --hang-timeout; a preset's ``hang-timeout`` per model; 0: never). The default
    comes from a measurement (docs/operations.md, "A hung worker")."""
    timeout: float = 600.0
    """llama-server's ``-to``/``--timeout`` (LLAMA_ARG_TIMEOUT, MODELROUTER_TIMEOUT): seconds a read or a
    write may wait, on the service's port (a client's request body, a client that takes no answer) and
    on the hop to the workers (an answer's next bytes), as llama-server's router applies it to both."""
    queue_timeout: float = 60.0
    """Seconds a request may wait for a model slot before 503 (MODELROUTER_QUEUE_TIMEOUT)."""
    max_queued_requests: int = 512
    """Requests that may wait for a model at once (MODELROUTER_MAX_QUEUED_REQUESTS); the next gets 503
    at once instead of queueing (Ollama's OLLAMA_MAX_QUEUE has the same default). 0 = no cap."""
    max_downloads: int = 4
    """Download workers at once (MODELROUTER_MAX_DOWNLOADS); more jobs wait ``queued``, in order. 0 = no cap."""
    resume_downloads_on_start: bool = True
    """Restart interrupted downloads after a crash (MODELROUTER_RESUME_DOWNLOADS_ON_START)."""
    stall_timeout: float = 30.0
    """Seconds without a byte before a download connection is retried (MODELROUTER_STALL_TIMEOUT)."""
    snapshot_every: int = 10_000
    """Take a snapshot of the fold every N events (MODELROUTER_SNAPSHOT_EVERY)."""
    tail_lag_limit: float = 2.0
    """Seconds the live state may lag the log before /health answers 503 (MODELROUTER_TAIL_LAG_LIMIT)."""
    tail_wakeups: bool = True
    """Writers wake the tail after each commit, and it polls once a second as a safety net
    (MODELROUTER_TAIL_WAKEUPS); false: it polls every 10 ms, as before (for comparison in bench/idle.py)."""
    sse_keepalive: float = 15.0
    """Seconds of silence before an SSE keep-alive comment (MODELROUTER_SSE_KEEPALIVE)."""
    log_json: bool | None = None
    """Force JSON logs (true) or console logs (false); default: console on a TTY."""
    worker_log_max_bytes: int = 10 * 1024 * 1024
    """A worker's log file rotates past this size (MODELROUTER_WORKER_LOG_MAX_BYTES)."""
    worker_log_backups: int = 3
    """Rotated files kept per worker (MODELROUTER_WORKER_LOG_BACKUPS)."""
    worker_log_budget_bytes: int = 256 * 1024 * 1024
    """All workers' log files together; the oldest go first (MODELROUTER_WORKER_LOG_BUDGET_BYTES)."""
    worker_log_max_pending: int = 10_000
    """Lines of one worker waiting to be written; past them its lines are dropped and counted
    (MODELROUTER_WORKER_LOG_MAX_PENDING)."""
    max_body_bytes: int = 10 * 1024 * 1024
    """Largest request body on the inference routes (MODELROUTER_MAX_BODY_BYTES); past it, 413."""
    rate_window_s: float = 60.0
    """The window of a named key's ``rpm``/``tpm`` (MODELROUTER_RATE_WINDOW_S): "per minute" unless
    a test or a demo shortens it."""
    max_control_body_bytes: int = 64 * 1024
    """Largest request body on the control routes, ``/models*`` and ``/downloads*``
    (MODELROUTER_MAX_CONTROL_BODY_BYTES): their bodies are a model name."""
    max_streams: int = 1000
    """Open SSE connections (``/events/stream``, ``/models/sse``) at once (MODELROUTER_MAX_STREAMS);
    past it, 503 with ``Retry-After``. 0 = no cap. Chosen from ``bench/sse_streams.py``."""
    disk_reserve_bytes: int = 1024 * 1024 * 1024
    """Free bytes a download must leave in the cache dir (MODELROUTER_DISK_RESERVE_BYTES); a
    download that would leave less is refused (507) before it starts."""
    cache_disk_max: int | None = None
    """Bytes of saved prompt cache per model (--cache-disk-max, MODELROUTER_CACHE_DISK_MAX; 0: off), for every
    model over its preset's ``cache-disk-max``; None: the preset's, else the worker's default (2 GiB)."""
    spec_adaptive: bool | None = None
    """Adaptive drafting for every model (--spec-adaptive/--no-spec-adaptive, MODELROUTER_SPEC_ADAPTIVE), over
    its preset's ``spec-adaptive``; None: the preset's, else on."""
    cache_disk_total: int = 8 * 1024**3
    """Bytes of saved prompt cache across every model (--cache-disk-total, MODELROUTER_CACHE_DISK_TOTAL): past
    it the service deletes the least recently used files (``prompt_cache_discarded``, reason ``budget``)."""
    models_memory_margin: str = "10%"
    """Memory kept free of models (--models-memory-margin, MODELROUTER_MODELS_MEMORY_MARGIN): bytes
    (``2G``, ``512M``) or a share of the memory (``10%``). Ours: models are evicted, or a load refused
    with 507, by their estimated need against the memory less this margin."""
    memory_bytes: int = 0
    node: str | None = None
    """This service's node in a cluster (--node, MODELROUTER_NODE): several services on one PostgreSQL
    log, each supervising its own workers (docs/cluster.md). None: a service alone."""
    advertise_url: str | None = None
    """Where the other nodes reach this one's API (--advertise-url, MODELROUTER_ADVERTISE_URL); required
    with ``node``."""
    """The memory models are budgeted against (MODELROUTER_MEMORY_BYTES); 0: the machine's RAM, or its
    cgroup's limit when lower (a container's)."""
    # --- llama-server's router options (see service/llamacpp and docs/llama-cpp-compat.md) ---
    metrics: bool = False
    """``GET /metrics`` answers (--metrics, LLAMA_ARG_ENDPOINT_METRICS, MODELROUTER_METRICS); else 501, as
    llama-server answers without --metrics."""
    cors_origins: str = "*"
    """--cors-origins: ``*``, one origin, a comma-separated list, or ``localhost`` (reflect a local Origin)."""
    cors_methods: str = "GET, POST, DELETE, OPTIONS"
    """--cors-methods: a preflight's Access-Control-Allow-Methods."""
    cors_headers: str = "*"
    """--cors-headers: a preflight's Access-Control-Allow-Headers."""
    cors_credentials: bool = True
    """--cors-credentials (default on, as in llama-server): with ``*`` origins, the Origin is echoed."""
    api_keys: tuple[str, ...] = ()
    """Keys required on every endpoint but /health (--api-key, --api-key-file, LLAMA_API_KEY). Secret."""
    offline: bool = False
    """No Hub access; models come from the caches (--offline, LLAMA_ARG_OFFLINE, LLAMA_OFFLINE, HF_HUB_OFFLINE)."""
    llama_cache: Path | None = None
    """llama.cpp's model cache, listed as a model source (LLAMA_CACHE, else HF_HUB_CACHE, ..., see
    service.llamacpp.router_args.llama_cache_dir); None: only ``hub_cache`` is listed."""
    hf_repo: str | None = None
    """-hf user/repo[:quant]: a repo's preset.ini runs as the preset, else its GGUF is served and loaded."""
    hf_file: str | None = None
    """--hf-file: the file of --hf-repo to serve."""
    model_file: Path | None = None
    """-m FILE: a local GGUF served and loaded at start (llama-server's single-model mode)."""
    mmproj_file: Path | None = None
    """--mmproj FILE: the -m model's multimodal projector (its worker evaluates images with it)."""
    aliases: tuple[str, ...] = ()
    """--alias: aliases of the -hf / -m model."""
    model_args: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Per-model llama-server options from the command line: applied to every model, over its preset."""
    model_env_args: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Per-model llama-server options from LLAMA_ARG_* variables: every model's lowest layer."""
    ssl_keyfile: Path | None = None
    """TLS key (--ssl-key-file); with ssl_certfile, the service speaks HTTPS."""
    ssl_certfile: Path | None = None
    """TLS certificate (--ssl-cert-file)."""
    log_level: str = "info"
    """debug, info, error, or off (--verbose, --log-verbosity; --log-disable: off, nothing logged)."""
    log_file: Path | None = None
    """llama-server's --log-file: the service's log, workers' forwarded lines included, also appended to this file."""
    log_colors: str = "auto"
    """llama-server's --log-colors: on, off or auto (colours when stderr is a terminal); console format only."""
    log_prefix: bool | None = None
    """llama-server's --log-prefix: each console line starts with its level; None: the console format's default."""
    log_timestamps: bool | None = None
    """llama-server's --log-timestamps: each console line carries its time; None: the console format's default."""
    fake_timing: bool = False
    """llama.cpp's LLAMA_SERVER_DEBUG_FAKE_TIMING: each proxied request holds its model 2 s, each load waits 2 s."""
    environment: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(os.environ), repr=False)
    """The environment the service was started with, handed on to its workers (read here, once)."""
    service_pid: int = dataclasses.field(default_factory=os.getpid, repr=False)
    """This process: the parent its workers watch (``--parent-pid``)."""

    def __post_init__(self) -> None:
        if not self.database_url:
            object.__setattr__(self, "database_url", f"sqlite+aiosqlite:///{self.home / 'modelrouter.db'}")
        check_url(self.database_url)
        if self.hub_cache is None:
            object.__setattr__(self, "hub_cache", self.home / "hub")
        if self.synchronous not in ("FULL", "NORMAL"):
            msg = f"synchronous must be FULL or NORMAL, got {self.synchronous!r}"
            raise ValueError(msg)
        if self.max_queued_requests < 0:
            msg = "max_queued_requests must be >= 0"
            raise ValueError(msg)
        if self.max_downloads < 0:
            msg = "max_downloads must be >= 0"
            raise ValueError(msg)
        for name in ("models_max", "max_streams", "disk_reserve_bytes", "memory_bytes", "cache_disk_total"):
            if getattr(self, name) < 0:
                msg = f"{name} must be >= 0"
                raise ValueError(msg)
        if not self.hosts:
            msg = "--host requires at least one address"
            raise ValueError(msg)
        if self.node is not None and not (self.postgres and self.advertise_url):
            msg = "--node needs a postgresql:// --database-url (the shared log) and an --advertise-url"
            raise ValueError(msg)
        if self.cache_disk_max is not None and self.cache_disk_max < 0:
            msg = "cache_disk_max must be >= 0"
            raise ValueError(msg)
        parse_margin(self.models_memory_margin, 1)  # a bad margin fails at start, naming it
        if not self.timeout >= 1:  # llama-server takes any integer; a read or write limit must be a second at least
            msg = f"timeout (-to/--timeout, MODELROUTER_TIMEOUT) must be a number of seconds >= 1, got {self.timeout:g}"
            raise ValueError(msg)
        if not 0 <= self.hang_timeout < math.inf:  # also refuses NaN, which would turn the watch off unsaid
            msg = f"hang_timeout (--hang-timeout, MODELROUTER_HANG_TIMEOUT) must be >= 0 s, got {self.hang_timeout:g}"
            raise ValueError(msg)
        if not 1 <= self.rate_window_s < math.inf:
            msg = f"rate_window_s (MODELROUTER_RATE_WINDOW_S) must be >= 1 s, got {self.rate_window_s:g}"
            raise ValueError(msg)
        for name in ("max_body_bytes", "max_control_body_bytes", "worker_log_max_pending"):
            if getattr(self, name) < 1:
                msg = f"{name} must be >= 1"
                raise ValueError(msg)

    def __repr__(self) -> str:
        def shown(name: str) -> str:
            value = getattr(self, name)
            if name == "database_url":
                return repr(redacted(value))  # a PostgreSQL URL may carry a password
            return "'[redacted]'" if name in SECRET_FIELDS and value else repr(value)

        return f"Settings({', '.join(f'{f.name}={shown(f.name)}' for f in dataclasses.fields(self) if f.repr)})"

    def secrets(self) -> list[str]:
        """The secret values, for log redaction (each API key on its own)."""
        found: list[str] = []
        for name in SECRET_FIELDS:
            value = getattr(self, name)
            found += [str(v) for v in value] if isinstance(value, tuple) else [str(value)] if value else []
        password = without_password(self.database_url)[1] if self.postgres else None
        return [*found, password] if password else found

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every address to listen on, in order (llama-server's ``parse_csv_row`` of ``--host``)."""
        return tuple(dict.fromkeys(h.strip() for h in self.host.split(",") if h.strip()))

    @property
    def postgres(self) -> bool:
        """Whether the log is on a PostgreSQL server rather than in a SQLite file."""
        return is_postgres(self.database_url)

    def worker_environment(self, **extra: str) -> dict[str, str]:
        """A worker's environment: the service's own, its SQLite durability, and ``extra``."""
        node = {"MODELROUTER_NODE": self.node} if self.node else {}  # workers stamp it in each event's source
        return {**self.environment, "MODELROUTER_SYNCHRONOUS": self.synchronous, **node, **extra}

    @property
    def db_path(self) -> Path:
        """The SQLite file (workers open it directly); ValueError for a PostgreSQL URL."""
        return sqlite_path(self.database_url)

    @property
    def store_location(self) -> Path | str:
        """What the stores open: the SQLite file, or the PostgreSQL URL."""
        return self.database_url if self.postgres else self.db_path

    @property
    def cache_dir(self) -> Path:
        assert self.hub_cache is not None
        return self.hub_cache

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``environ`` (default ``os.environ``); keyword overrides
        (CLI flags) win. Unset overrides (None) are ignored."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}  # Settings' fields by name: each has its own type
        for name, (var, convert) in _FROM_ENV.items():
            if env.get(var):
                values[name] = convert(env[var])
        values["fake_timing"] = bool(env.get("LLAMA_SERVER_DEBUG_FAKE_TIMING"))
        values["environment"] = dict(env)
        # llama.cpp's names: downloads land in LLAMA_CACHE when it is set (drop-in), and
        # MODEL_ENDPOINT beats HF_ENDPOINT as in common_get_model_endpoint().
        if "hub_cache" not in values and env.get("LLAMA_CACHE"):
            values["hub_cache"] = Path(env["LLAMA_CACHE"]).expanduser()
        if env.get("MODEL_ENDPOINT"):
            values["hf_endpoint"] = env["MODEL_ENDPOINT"].rstrip("/")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


_FROM_ENV: dict[str, tuple[str, Any]] = {  # Any: each field's converter, from the variable's text
    "home": ("MODELROUTER_HOME", Path),
    "host": ("MODELROUTER_HOST", str),
    "port": ("MODELROUTER_PORT", int),
    "database_url": ("MODELROUTER_DATABASE_URL", str),
    "synchronous": ("MODELROUTER_SYNCHRONOUS", lambda s: s.upper()),
    "hub_cache": ("MODELROUTER_HUB_CACHE", Path),
    "models_dir": ("MODELROUTER_MODELS_DIR", Path),
    "presets": ("MODELROUTER_PRESETS", Path),
    "hf_endpoint": ("HF_ENDPOINT", str),
    "hf_token": ("HF_TOKEN", str),
    "models_max": ("MODELROUTER_MODELS_MAX", int),
    "autoload": ("MODELROUTER_AUTOLOAD", _bool),
    "load_timeout": ("MODELROUTER_LOAD_TIMEOUT", float),
    "stop_timeout": ("MODELROUTER_STOP_TIMEOUT", float),
    "queue_timeout": ("MODELROUTER_QUEUE_TIMEOUT", float),
    "hang_timeout": ("MODELROUTER_HANG_TIMEOUT", float),
    "timeout": ("MODELROUTER_TIMEOUT", float),
    "max_downloads": ("MODELROUTER_MAX_DOWNLOADS", int),
    "max_queued_requests": ("MODELROUTER_MAX_QUEUED_REQUESTS", int),
    "resume_downloads_on_start": ("MODELROUTER_RESUME_DOWNLOADS_ON_START", _bool),
    "stall_timeout": ("MODELROUTER_STALL_TIMEOUT", float),
    "snapshot_every": ("MODELROUTER_SNAPSHOT_EVERY", int),
    "sse_keepalive": ("MODELROUTER_SSE_KEEPALIVE", float),
    "tail_lag_limit": ("MODELROUTER_TAIL_LAG_LIMIT", float),
    "tail_wakeups": ("MODELROUTER_TAIL_WAKEUPS", _bool),
    "log_json": ("MODELROUTER_LOG_JSON", _bool),
    "worker_log_max_bytes": ("MODELROUTER_WORKER_LOG_MAX_BYTES", int),
    "worker_log_backups": ("MODELROUTER_WORKER_LOG_BACKUPS", int),
    "worker_log_budget_bytes": ("MODELROUTER_WORKER_LOG_BUDGET_BYTES", int),
    "worker_log_max_pending": ("MODELROUTER_WORKER_LOG_MAX_PENDING", int),
    "max_body_bytes": ("MODELROUTER_MAX_BODY_BYTES", int),
    "rate_window_s": ("MODELROUTER_RATE_WINDOW_S", float),
    "max_control_body_bytes": ("MODELROUTER_MAX_CONTROL_BODY_BYTES", int),
    "max_streams": ("MODELROUTER_MAX_STREAMS", int),
    "disk_reserve_bytes": ("MODELROUTER_DISK_RESERVE_BYTES", int),
    "cache_disk_max": ("MODELROUTER_CACHE_DISK_MAX", int),
    "cache_disk_total": ("MODELROUTER_CACHE_DISK_TOTAL", int),
    "spec_adaptive": ("MODELROUTER_SPEC_ADAPTIVE", _bool),
    "metrics": ("MODELROUTER_METRICS", _bool),
    "models_memory_margin": ("MODELROUTER_MODELS_MEMORY_MARGIN", str),
    "memory_bytes": ("MODELROUTER_MEMORY_BYTES", int),
    "node": ("MODELROUTER_NODE", str),
    "advertise_url": ("MODELROUTER_ADVERTISE_URL", lambda s: s.rstrip("/")),
}
"""Settings read by :meth:`Settings.from_env`: field -> (variable, converter)."""
