"""What is on disk in the Hugging Face cache: bytes held by a job's blobs, and partial files."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from service.core.cache_layout import CachePaths


def partial_bytes(paths: CachePaths, sha256s: Iterable[str]) -> int:
    """Bytes on disk for these blobs: complete blobs count whole, partials by size.
    A file may vanish between looks (a removal, a finishing download renaming its
    partial): it then counts as absent, never as an error."""
    total = 0
    for sha in sha256s:
        for candidate in (paths.blob(sha), paths.incomplete(sha)):
            try:
                total += candidate.stat().st_size
            except FileNotFoundError:
                continue
            break
    return total


def find_partials(cache_dir: Path) -> Iterator[Path]:
    """Every ``*.incomplete`` file under the cache (recovery reports the orphans)."""
    if cache_dir.is_dir():
        yield from sorted(cache_dir.glob("models--*/blobs/*.incomplete"))


def free_bytes(path: Path) -> int:
    """Free bytes on the file system that holds ``path`` (or would: the nearest
    existing ancestor is measured, since the cache dir may not exist yet)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free
