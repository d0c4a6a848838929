"""Bodies and answers of the control routes (``/models*``, ``/downloads*``)."""

from __future__ import annotations

import msgspec

from service.api.schemas._catalogue import JobStatusValue, ModelEntry, ModelStatusValue
from service.api.schemas._common import ModelName
from service.core.state import FailureJSON


class ModelCommand(msgspec.Struct, frozen=True):
    """``{"model": name}``: the body of ``POST /models``, ``/models/load`` and ``/models/unload``.
    Other members are ignored, as llama.cpp does."""

    model: ModelName


class FileView(msgspec.Struct, frozen=True):
    """One file of a download: its path in the repo, size and sha256 (None for non-LFS files)."""

    path: str
    size: int
    sha256: str | None


class JobView(msgspec.Struct, frozen=True):
    """``GET /downloads/{job_id}``."""

    job_id: str
    model: str
    status: JobStatusValue
    repo: str
    revision: str
    commit: str
    files: list[FileView]
    bytes_done: int
    bytes_total: int
    bytes_per_second: float | None
    eta_seconds: float | None
    pid: int | None
    requested_at: str | None
    started_at: str | None
    finished_at: str | None
    error: FailureJSON | None
    node: str | msgspec.UnsetType = msgspec.UNSET
    """Ours, in a cluster: the node whose worker moves the bytes, into its own cache."""


class JobList(msgspec.Struct, frozen=True):
    """``GET /downloads``: every job, oldest first."""

    downloads: list[JobView]


class DownloadAnswer(msgspec.Struct, frozen=True):
    """``POST /models``: the job started or joined (``job_id`` None when already downloaded)."""

    success: bool
    model: str
    job_id: str | None
    joined: bool
    already_downloaded: bool
    status: str
    files: list[FileView]
    total_bytes: int


class LoadAnswer(msgspec.Struct, frozen=True):
    """``POST /models/load``: the worker is starting (or already running)."""

    success: bool
    model: str
    status: ModelStatusValue


class ReloadAnswer(msgspec.Struct, frozen=True):
    """``POST /models/reload``: what the reload changed (as its ``models_reloaded`` event)."""

    success: bool
    added: list[str]
    changed: list[str]
    removed: list[str]
    unloaded: list[str]


class UnloadAnswer(msgspec.Struct, frozen=True, omit_defaults=True):
    """``POST /models/unload``: the model's status afterwards, or the cancelled download."""

    success: bool
    model: str
    status: ModelStatusValue | msgspec.UnsetType | None = msgspec.UNSET
    download: JobView | msgspec.UnsetType = msgspec.UNSET


class RemoveAnswer(msgspec.Struct, frozen=True):
    """``DELETE /models``: what went from disk, and the model's entry afterwards."""

    success: bool
    model: str
    files: list[str]
    bytes_freed: int
    kept_blobs: list[str]
    entry: ModelEntry
