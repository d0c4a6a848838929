"""Download events: a job from request to done, failed or cancelled (``docs/event-catalogue.md``).

Re-exported by :mod:`service.core.events`, the vocabulary's one front. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from service.core.event_base import Event, FileRef, coerce_files


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
    node: str | None = None  # a cluster: the node that downloads it (its supervisor); None: the writer

    def __post_init__(self) -> None:
        coerce_files(self)


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
        coerce_files(self)


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
        coerce_files(self)


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
