"""Cached repos -> models under llama.cpp's names (``user/repo:TAG``). Pure.

As ``common_list_cached_models``: every first part of a model GGUF whose file
name carries a tag (``-Q8_0``, ``.F16``...) is a model ``repo:TAG`` (the tag
upper-cased); the other parts of a split model and its projector
(``mmproj*.gguf``) belong to it and are not listed; files without a tag are not
listed. The files of a tag are chosen as for a download
(:func:`service.core.model_spec.choose_files`), so a cached model and a
downloaded one of the same name have the same files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.catalogue.disk import CachedFile, CachedRepo
from service.core.events import FileRef
from service.core.model_spec import (
    FileChoice,
    FileEntry,
    ModelFileError,
    ModelSpec,
    choose_file,
    choose_files,
    is_model_gguf,
    split_info,
)


@dataclass(frozen=True, slots=True)
class CacheModel:
    """One model found in a cache: its name, repo and files as ``model_discovered`` records them."""

    name: str
    repo: str
    files: tuple[FileRef, ...]

    @property
    def path(self) -> str:
        """The file a loader opens: the snapshot link of the first part."""
        return self.files[0].local_path


def _record(f: CachedFile) -> FileRef:
    # snapshot_path, blob_path and sha256: what removal (service/core/removal_plan.py) needs.
    return FileRef(path=f.path, size=f.size, sha256=f.sha256, snapshot_path=f.snapshot_path, blob_path=f.blob_path)


def _entries(repo: CachedRepo) -> list[FileEntry]:
    return [FileEntry(f.path, f.size, f.sha256) for f in repo.files]


def _model(repo: CachedRepo, name: str, choice: FileChoice) -> CacheModel:
    by_path = {f.path: f for f in repo.files}
    return CacheModel(name, repo.repo, tuple(_record(by_path[f.path]) for f in choice.files))


def tags(repo: CachedRepo) -> list[str]:
    """The tags llama.cpp lists for ``repo``, in file order."""
    found: dict[str, None] = {}
    for f in sorted(repo.files, key=lambda f: f.path):
        info = split_info(f.path)
        if info is not None and info.index == 1 and info.tag and is_model_gguf(f.path):
            found.setdefault(info.tag, None)
    return list(found)


def cache_models(repos: Iterable[CachedRepo]) -> dict[str, CacheModel]:
    """Every listed model of ``repos`` (an incomplete split is skipped: it cannot load)."""
    models: dict[str, CacheModel] = {}
    for repo in repos:
        entries = _entries(repo)
        for tag in tags(repo):
            name = ModelSpec(repo.repo, tag).canonical
            if name in models:
                continue  # the first cache listed wins (ours before llama.cpp's)
            try:
                models[name] = _model(repo, name, choose_files(entries, tag))
            except ModelFileError:
                continue
    return models


def find_in_cache(repos: Iterable[CachedRepo], repo: str, quant: str | None, hf_file: str | None) -> CacheModel | None:
    """The cached files ``-hf repo[:quant]`` (or ``--hf-file``) resolves to offline,
    as llama.cpp's ``common_download_resolve_path``; None when not cached."""
    for cached in repos:
        if cached.repo != repo:
            continue
        entries = _entries(cached)
        try:
            choice = choose_file(entries, hf_file) if hf_file else choose_files(entries, quant)
        except ModelFileError:
            continue
        return _model(cached, ModelSpec(repo, choice.quant).canonical, choice)
    return None
