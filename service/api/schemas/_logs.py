"""``GET /models/{id}/logs`` and ``GET /downloads/{job_id}/logs``: the end of one worker's log."""

from __future__ import annotations

import msgspec


class WorkerLogView(msgspec.Struct, frozen=True):
    """The last ``tail`` lines of one worker's file (``<home>/logs/workers``), oldest first:
    what it wrote on stdout and stderr, llama.cpp's load log included (docs/operations.md)."""

    log_path: str
    lines: list[str]
    model: str | None = None
    instance_id: str | None = None
    job_id: str | None = None
