"""Decisions about the prompt cache on disk (issue 35): where a model's files lie, and which of
them the total budget across models deletes. Pure: the service applies them
(:mod:`service.supervision.prompt_cache`).

Each worker keeps its own model's files under ``--cache-disk-max``; only the service sees every
model, so the total budget (``--cache-disk-total``) is decided here, from the fold alone.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePath

from service.core.state import ModelState, RouterState

DIR_NAME = "prompt-cache"
"""The directory under the service's home holding one directory per model."""

DEFAULT_TOTAL_BYTES = 8 * 1024**3
"""The total budget across models by default: four models at the per-model default of 2 GiB."""

_NEVER = datetime.min.replace(tzinfo=UTC)  # a file without a time sorts first
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def model_dir_name(model: str) -> str:
    """A filesystem-safe, collision-free directory name for ``model``: its readable part, then a short
    hash of the whole name (``user/repo:Q4`` and ``user_repo:Q4`` must not share a directory)."""
    readable = _UNSAFE.sub("_", model).strip("._") or "model"
    digest = hashlib.sha256(model.encode()).hexdigest()[:8]
    return f"{readable[:80]}-{digest}"


def file_path(cache_root: PurePath, model: str, file: str) -> PurePath:
    """Where a recorded ``file`` lies: as is when absolute, else in the model's directory."""
    recorded = PurePath(file)
    return recorded if recorded.is_absolute() else cache_root / model_dir_name(model) / recorded


def model_sha256(model: ModelState) -> str | None:
    """The model file's sha256 when the log knows it (its download or catalogue entry): the first
    non-projector GGUF's, as the worker loads it. None: the worker is given none."""
    weights = sorted(
        (f for f in model.files if f.path.endswith(".gguf") and "mmproj" not in f.path.lower()), key=lambda f: f.path
    )
    return weights[0].sha256 if weights and weights[0].sha256 else None


@dataclass(frozen=True, slots=True)
class Discard:
    """One file the budget deletes."""

    model: str
    file: str
    bytes: int


def total_bytes(state: RouterState) -> int:
    """The bytes of every saved prompt-cache file the log knows of."""
    return sum(entry.bytes for m in state.models.values() for entry in m.prompt_cache.values())


def over_budget(state: RouterState, budget: int) -> list[Discard]:
    """The files to delete so that the total fits ``budget``: the least recently used first (by their
    last save or restore; ties: by model, then file, so the choice is reproducible). A budget <= 0
    keeps nothing: the feature is off."""
    entries = [(name, entry) for name, m in state.models.items() for entry in m.prompt_cache.values()]
    entries.sort(key=lambda pair: (pair[1].used_at or _NEVER, pair[0], pair[1].file))
    total = sum(entry.bytes for _, entry in entries)
    chosen: list[Discard] = []
    for name, entry in entries:
        if total <= max(budget, 0) and budget > 0:
            break
        chosen.append(Discard(model=name, file=entry.file, bytes=entry.bytes))
        total -= entry.bytes
    return chosen
