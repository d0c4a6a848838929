"""What is on disk: GGUF files of a models dir, and snapshots of a Hugging Face cache.

The only I/O of the catalogue; the decisions over these listings are pure
(:mod:`service.catalogue.cache_models`, :mod:`service.catalogue.desired`).

Local paths are confined (issue 11 §2): a models-dir entry, a cache repo
folder or a cache snapshot link whose real path leads out of its directory is
refused with a reason (logged by the caller, never listed), and so is a split
model missing a part. The models dir and a cache may themselves be symlinks:
confinement is checked against their real paths.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from service.core.model_spec import validate_repo_id

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-", "eagle3-")  # speculative sidecars, not models


@dataclass(frozen=True, slots=True)
class Refusal:
    """A file that is not listed, and why."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class CachedFile:
    """One file of a cached snapshot: where clients open it, and the blob behind it."""

    path: str  # inside the repo, "/"-separated
    snapshot_path: str
    blob_path: str | None
    size: int
    sha256: str | None  # the blob's name when it is a sha256 (LFS files)


@dataclass(frozen=True, slots=True)
class CachedRepo:
    """One ``models--user--repo`` folder at the commit its ref names."""

    repo: str
    commit: str
    files: tuple[CachedFile, ...]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _cached_ref(repo_dir: Path) -> str:
    """``refs/main``, else the first valid ref (llama.cpp's ``get_cached_ref``)."""
    refs = repo_dir / "refs"
    if not refs.is_dir():
        return ""
    fallback = ""
    for ref in sorted(p for p in refs.rglob("*") if p.is_file()):
        commit = ref.read_text().strip()
        if not _COMMIT.match(commit):
            continue
        if ref.relative_to(refs).as_posix() == "main":
            return commit
        fallback = fallback or commit
    return fallback


def _cached_file(entry: Path, snapshot: Path, repo_dir: Path, refused: list[Refusal]) -> CachedFile | None:
    real = entry.resolve()
    if not _inside(real, repo_dir.resolve()):
        refused.append(Refusal(str(entry), f"its link leads out of {repo_dir.name} (to {real})"))
        return None
    if not real.is_file():
        return None  # a dangling link: a blob being written or removed
    blob = str(real) if entry.is_symlink() else None
    return CachedFile(
        path=entry.relative_to(snapshot).as_posix(),
        snapshot_path=str(entry),
        blob_path=blob,
        size=real.stat().st_size,
        sha256=real.name if blob and _SHA256.match(real.name) else None,
    )


def scan_cache(cache_dir: Path) -> tuple[list[CachedRepo], list[Refusal]]:
    """Every repo of the HF cache at ``cache_dir`` with the files of its current snapshot.
    A repo folder that is a link leading out of the cache is refused, as is a snapshot
    link leading out of its repo folder."""
    repos: list[CachedRepo] = []
    refused: list[Refusal] = []
    cache_dir = cache_dir.absolute()
    if not cache_dir.is_dir():
        return repos, refused
    cache_root = cache_dir.resolve()
    for repo_dir in sorted(cache_dir.glob("models--*")):
        repo = repo_dir.name[len("models--") :].replace("--", "/")
        try:
            validate_repo_id(repo)
        except ValueError:
            continue
        real = repo_dir.resolve()
        if not _inside(real, cache_root) or real == cache_root:
            refused.append(Refusal(str(repo_dir), f"it is a link that leads out of the cache {cache_dir} (to {real})"))
            continue
        try:
            found = _cached_repo(repo, repo_dir, refused)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed (or published) while we read it: the next reading sees it whole
        if found is not None:
            repos.append(found)
    return repos, refused


def _cached_repo(repo: str, repo_dir: Path, refused: list[Refusal]) -> CachedRepo | None:
    commit = _cached_ref(repo_dir)
    snapshot = repo_dir / "snapshots" / commit
    if not commit or not snapshot.is_dir():
        return None
    files = []
    for entry in sorted(snapshot.rglob("*")):
        if entry.is_symlink() or entry.is_file():
            found = _cached_file(entry, snapshot, repo_dir, refused)
            if found is not None:
                files.append(found)
    return CachedRepo(repo, commit, tuple(files))


def _is_companion(name: str) -> bool:
    lowered = name.lower()
    return "mmproj" in lowered or lowered.startswith(_DRAFT_PREFIXES)


def _confined(entry: Path, root: Path, refused: list[Refusal]) -> bool:
    real = entry.resolve()
    if _inside(real, root):
        return True
    refused.append(Refusal(str(entry), f"it is a link that leads out of the models dir (to {real})"))
    return False


def _complete_split(parts: list[Path], root: Path, refused: list[Refusal]) -> bool:
    """Whether ``parts`` (one split model's files, sorted) can load: every part present,
    and none leading out of the models dir (a refused part refuses the model)."""
    match = _SPLIT.search(parts[0].name) if parts else None
    if match is None:
        return bool(parts)
    usable = [p for p in parts if _confined(p, root, []) and p.resolve().is_file()]
    if len(usable) != int(match.group(2)):
        reason = f"split model with {len(usable)} usable of {int(match.group(2))} parts"
        refused.append(Refusal(str(parts[0]), reason + " (a part is missing or leads out of the models dir)"))
        return False
    return True


def _subdir_model(folder: Path, root: Path, refused: list[Refusal]) -> list[Path]:
    candidates = sorted(folder.glob("*.gguf"))
    ggufs = [p for p in candidates if _confined(p, root, refused) and p.resolve().is_file()]
    models = [p for p in ggufs if not _is_companion(p.name)]
    if len(ggufs) != len(candidates) and any(not _is_companion(p.name) for p in candidates if p not in ggufs):
        refused.append(Refusal(str(folder), "a model file in it leads out of the models dir or is missing"))
        return []
    first = _SPLIT.search(models[0].name) if models else None
    if first is not None and not _complete_split(
        sorted(p for p in models if _SPLIT.sub("", p.name) == _SPLIT.sub("", models[0].name)), root, refused
    ):
        return []
    return models + [p for p in ggufs if "mmproj" in p.name.lower()] if models else []


def scan_models_dir(models_dir: Path) -> tuple[dict[str, list[Path]], list[Refusal]]:
    """``name -> files`` of llama.cpp's ``--models-dir`` layout: each ``*.gguf`` is a
    model named after its stem (split parts grouped under the first one's name);
    each subdirectory is one model named after it, its projector included."""
    found: dict[str, list[Path]] = {}
    refused: list[Refusal] = []
    if not models_dir.is_dir():
        return found, refused
    root = models_dir.resolve()
    for entry in sorted(models_dir.iterdir()):
        if entry.name.startswith(".") or not _confined(entry, root, refused):
            continue
        if entry.is_dir():
            files = _subdir_model(entry, root, refused)
            if files:
                found[entry.name] = files
        elif entry.suffix.lower() == ".gguf" and entry.is_file() and not _is_companion(entry.name):
            match = _SPLIT.search(entry.name)
            if match is None:
                found[entry.stem] = [entry]
            elif match.group(1) == "00001":
                stem = _SPLIT.sub("", entry.name)
                parts = sorted(models_dir.glob(f"{stem}-*-of-{match.group(2)}.gguf"))
                if _complete_split(parts, root, refused):
                    found[stem] = parts
    return found, refused


def local_file(path: str, *, base: Path | None = None) -> tuple[Path | None, str]:
    """A preset's ``model =`` path, explicitly configured: ``(path, "")`` when usable,
    else ``(None, reason)``. Relative paths start at the working directory, as in llama.cpp."""
    file = Path(path).expanduser()
    if not file.is_absolute():
        file = (base or Path.cwd()) / file
    if not os.path.lexists(file):
        return None, "no such file"
    if not file.exists():
        return None, "a link to a file that does not exist"
    if file.is_dir():
        return None, "a directory, not a GGUF file"
    if not os.access(file, os.R_OK):
        return None, "not readable"
    return file, ""
