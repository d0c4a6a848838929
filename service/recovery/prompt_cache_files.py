"""``modelrouter verify``'s ``prompt_cache`` check (issue 35): the saved prompt-cache files on disk
against what the log says of them.

A file the log says exists (``prompt_cache_saved``, not discarded since) must be there with the
recorded size: otherwise the check fails, since the next load would count on it. A file on disk the
log does not know, or a ``*.tmp-*`` left by a save cut off (a crash, kill -9), fails nothing: no load
uses it, but it takes room the budgets do not see, so it is listed for deletion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from service.core.prompt_cache import file_path
from service.core.state import RouterState


@dataclass
class CacheFindings:
    """What the check found: ``problems`` fail it, ``notes`` do not."""

    files: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_prompt_cache(state: RouterState, root: Path) -> CacheFindings:
    """Compare every saved file the fold knows with ``root`` (``<home>/prompt-cache``), then list
    what lies under ``root`` unknown to the log."""
    found = CacheFindings()
    known: set[Path] = set()
    for name, model in sorted(state.models.items()):
        for entry in sorted(model.prompt_cache.values(), key=lambda e: e.file):
            path = Path(file_path(root, name, entry.file))
            known.add(path)
            found.files += 1
            found.bytes += entry.bytes
            if not path.is_file():
                found.problems.append(f"{name}: {entry.file}: {path} is missing")
            elif (size := path.stat().st_size) != entry.bytes:
                found.problems.append(f"{name}: {entry.file}: {path} has {size} bytes, expected {entry.bytes}")
    if not root.is_dir():
        return found
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if ".tmp-" in path.name:
            found.notes.append(f"{path}: left by a save cut off (never used): delete it")
        elif path not in known:
            found.notes.append(f"{path}: not in the log (no prompt_cache_saved): never used, delete it")
    return found
