"""What the fold keeps of a model's prompt cache on disk (issue 35): one entry per saved file.

Beside :mod:`service.core.state`, which holds them per model (``ModelState.prompt_cache``).
Pure module: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class PromptCacheFile:
    """One saved prompt-cache file, as its events tell it: ``prompt_cache_saved`` adds it,
    ``prompt_cache_restored`` touches it (``restored_at``), ``prompt_cache_discarded`` and
    ``model_removed`` drop it. ``file`` is as the worker recorded it (see
    :func:`service.core.prompt_cache.file_path` for where it lies)."""

    file: str
    tokens: int
    bytes: int
    saved_at: datetime | None = None
    restored_at: datetime | None = None
    instance_id: str = ""  # the worker that saved it

    @property
    def used_at(self) -> datetime | None:
        """Its last use, saved or restored: what the least-recently-used budget orders by."""
        if self.restored_at is None:
            return self.saved_at
        if self.saved_at is None:
            return self.restored_at
        return max(self.saved_at, self.restored_at)
