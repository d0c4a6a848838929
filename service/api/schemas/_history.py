"""``GET /models/{id}/history``: a model's downloads and loads, oldest first."""

from __future__ import annotations

import msgspec


class DownloadHistory(msgspec.Struct, frozen=True):
    """One download job. ``outcome``: running, finished, failed, cancelled or
    interrupted; ``reason`` says why for failed and interrupted ones."""

    job_id: str
    requested_at: str
    ended_at: str | None
    duration_seconds: float | None
    outcome: str
    reason: str | None
    message: str | None
    revision: str
    quant: str | None
    bytes_total: int
    bytes_done: int
    resumed_bytes: int
    bytes_transferred: int | None
    log: str | None = None
    """Where its worker's log is read: ``/downloads/{job_id}/logs``."""


class LoadHistory(msgspec.Struct, frozen=True):
    """One instance. ``reason``: load, autoload, restart or startup. ``ended``:
    loading, running, unload, evicted, idle, shutdown, remove, reload, crashed
    (with ``exit_code``/``signal``), load_failed or lost."""

    instance_id: str
    reason: str
    requested_at: str
    ready_at: str | None
    load_ms: float | None
    pid: int | None
    uptime_seconds: float | None
    requests_served: int
    ended: str
    ended_at: str | None
    exit_code: int | None
    signal: int | None
    message: str | None
    node: str | None = None
    """In a cluster: the node that ran it (``GET /models/{id}/logs`` on any node reads that node's file)."""
    log: str | None = None
    """Where its worker's log is read: ``/models/{id}/logs?instance={instance_id}``."""


class PromptCacheHistory(msgspec.Struct, frozen=True):
    """One save, restore or discard of a saved prompt-cache file (issue 35). ``action``: saved, restored
    or discarded (``reason``: model_changed, settings_changed, corrupt, budget, model_removed)."""

    at: str
    action: str
    file: str
    tokens: int | None
    bytes: int
    instance_id: str | None
    reason: str | None
    lazy: bool | None


class ModelHistoryView(msgspec.Struct, frozen=True):
    """The timeline and its totals."""

    model: str
    downloads: list[DownloadHistory]
    loads: list[LoadHistory]
    restarts: int
    crashes: int
    requests_served: int
    prompt_cache: list[PromptCacheHistory] = msgspec.field(default_factory=list)
    """Saves, restores and discards of its prompt cache on disk, oldest first."""
