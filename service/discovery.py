"""Local models: GGUF files in ``models_dir`` become models (llama.cpp's ``--models-dir``).

Pure planning (:func:`plan_discovery`) over a directory listing, so a restart
appends only what changed: new or moved files (``model_discovered``) and
files that disappeared (``model_removed``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from service.core import events as ev
from service.core.state import RouterState
from service.event_store.codec import NewEvent

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def scan_models_dir(models_dir: Path) -> dict[str, list[Path]]:
    """``name -> files``: each ``*.gguf`` is a model named after its stem; each
    subdirectory is one model (its first shard first, mmproj files included)."""
    found: dict[str, list[Path]] = {}
    if not models_dir.is_dir():
        return found
    for entry in sorted(models_dir.iterdir()):
        if entry.is_file() and entry.suffix.lower() == ".gguf" and "mmproj" not in entry.name.lower():
            match = _SPLIT.search(entry.name)
            if match and match.group(1) != "00001":
                continue
            name = _SPLIT.sub("", entry.name) if match else entry.stem
            parts = sorted(entry.parent.glob(_SPLIT.sub("", entry.name) + "-*-of-*.gguf")) if match else [entry]
            found[name] = parts
        elif entry.is_dir():
            ggufs = sorted(p for p in entry.glob("*.gguf") if "mmproj" not in p.name.lower())
            if ggufs:
                found[entry.name] = ggufs + sorted(p for p in entry.glob("*.gguf") if "mmproj" in p.name.lower())
    return found


def plan_discovery(state: RouterState, found: dict[str, list[Path]]) -> list[NewEvent]:
    """Events that bring the fold in line with the directory listing."""
    planned: list[NewEvent] = []
    for name, files in found.items():
        primary = str(files[0])
        current = state.models.get(name)
        if current is not None and current.available and current.path == primary:
            continue
        sizes = [p.stat().st_size for p in files]
        listing = tuple({"path": str(p), "size": n} for p, n in zip(files, sizes, strict=True))
        size = sum(sizes)
        planned.append(
            NewEvent(ev.ModelDiscovered(source="models_dir", path=primary, files=listing, size=size), model=name)
        )
    for name, model in state.models.items():
        if model.source == "models_dir" and model.available and name not in found:
            planned.append(NewEvent(ev.ModelRemoved(files=tuple(str(f.get("path")) for f in model.files)), model=name))
    return planned


def discovery_events(state: RouterState, models_dirs: Iterable[Path]) -> list[NewEvent]:
    found: dict[str, list[Path]] = {}
    for directory in models_dirs:
        found.update(scan_models_dir(directory))
    return plan_discovery(state, found)
