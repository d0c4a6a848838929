"""File checks for ``modelrouter verify``: do finished downloads' files still
match what ``download_finished`` recorded?

The log says what was published (``files: [{path, size, sha256, blob_path,
snapshot_path}]``); the disk may since have lost a file, been truncated, or
(``--deep`` only, since it reads every byte) been altered.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from service.core.events import FileRef

_CHUNK = 1 << 20


@dataclass
class FileFindings:
    """What the file checks found: counts for the summary, problems and notes itemised."""

    models: int = 0
    files: int = 0
    hashed: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_model_files(model: str, files: Iterable[FileRef], *, deep: bool, out: FileFindings) -> None:
    """Check one model's published files into ``out``.

    ``snapshot_path`` (the HF-cache symlink clients open) and ``blob_path`` (its
    target) are checked for existence and size; with ``deep`` each distinct
    real file is hashed once. Entries without either path are skipped with a
    note: there is nothing on disk to compare with."""
    out.models += 1
    for entry in files:
        name = entry.path or "?"
        paths = [p for p in (entry.snapshot_path, entry.blob_path) if p]
        if not paths:
            out.notes.append(f"{model}: {name}: no blob_path/snapshot_path recorded, skipped")
            continue
        out.files += 1
        expected_size = entry.size or None  # 0: not recorded
        expected_sha = (entry.sha256 or "").lower()
        hashed: set[str] = set()
        for text in paths:
            path = Path(text)
            if not path.is_absolute():
                out.notes.append(f"{model}: {name}: {text} is not an absolute path, skipped")
                continue
            if not path.exists():
                out.problems.append(f"{model}: {name}: {text} is missing")
                continue
            size = path.stat().st_size
            if isinstance(expected_size, int) and size != expected_size:
                out.problems.append(f"{model}: {name}: {text} has {size} bytes, expected {expected_size}")
                continue
            real = os.path.realpath(path)
            if not deep or real in hashed:
                continue
            hashed.add(real)
            if not expected_sha:
                out.notes.append(f"{model}: {name}: no sha256 recorded, hash not checked")
                continue
            actual = sha256_of(path)
            out.hashed += 1
            if actual != expected_sha:
                out.problems.append(f"{model}: {name}: {text} has sha256 {actual}, expected {expected_sha}")
