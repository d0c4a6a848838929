"""``-hf user/repo[:quant]`` at start-up: a remote preset, or the one model to serve.

llama-server decides whether to run as a router from "no model and no -hf";
when the ``-hf`` repo holds a ``preset.ini``, that decision must wait until the
repo was looked at, or the server starts as a single model with an empty path
and exits (the regression in llama.cpp's PR #24834 review). Here the repo is
resolved first (:func:`resolve_hf`), and only its answer decides: a
:class:`RemotePreset` runs as the router's preset (only ``preset.ini`` is
fetched, with llama.cpp's key whitelist), anything else is the single model
(:class:`~service.catalogue.desired.SingleModel`), downloaded if needed and
loaded at start. Offline (or with the Hub unreachable) the caches answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from service.catalogue.cache_models import find_in_cache
from service.catalogue.desired import SingleModel
from service.catalogue.disk import CachedRepo
from service.core.model_spec import InvalidModelName, ModelSpec, parse_model_spec
from service.downloads.resolution import ResolutionError, resolve

PRESET_FILE = "preset.ini"
_TRANSPORTS = ("httpx", "httpx2", "httpcore", "httpcore2")


class HfSourceError(RuntimeError):
    """``-hf`` names nothing usable: the message says why (start-up fails with it)."""


@dataclass(frozen=True, slots=True)
class RemotePreset:
    """A ``preset.ini`` fetched from ``repo`` (into the download cache, HF layout)."""

    repo: str
    path: Path


def is_preset_repo(root_files: Sequence[str]) -> bool:
    """The decision llama.cpp makes: a ``preset.ini`` at the repo root makes a preset repo."""
    return PRESET_FILE in root_files


def _root_files(repo: str, endpoint: str, token: str | None) -> list[str]:
    from huggingface_hub import HfApi  # only with -hf: not among every start's imports
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=endpoint, token=token or False)
    return [item.path for item in api.list_repo_tree(repo, recursive=False) if isinstance(item, RepoFile)]


def _single(
    spec: ModelSpec, name: str, hf_file: str | None, repos: Sequence[CachedRepo], aliases: tuple[str, ...]
) -> SingleModel:
    cached = find_in_cache(repos, spec.repo, spec.quant, hf_file)
    files = cached.files if cached is not None and cached.name == name else ()
    return SingleModel(name, "cache", files, hf_repo=name, hf_file=hf_file, aliases=aliases)


def _offline(
    spec: ModelSpec, hf_file: str | None, repos: Sequence[CachedRepo], aliases: tuple[str, ...], why: str
) -> RemotePreset | SingleModel:
    for cached in repos:
        preset = next((f for f in cached.files if f.path == PRESET_FILE), None)
        if cached.repo == spec.repo and preset is not None:
            return RemotePreset(spec.repo, Path(preset.snapshot_path))
    found = find_in_cache(repos, spec.repo, spec.quant, hf_file)
    if found is None:
        msg = f"-hf {spec}: {why}, and it is not in the model caches"
        raise HfSourceError(msg)
    return SingleModel(found.name, "cache", found.files, hf_repo=found.name, hf_file=hf_file, aliases=aliases)


def resolve_hf(
    text: str,
    hf_file: str | None,
    *,
    cache_dir: Path,
    repos: Sequence[CachedRepo],
    endpoint: str,
    token: str | None,
    offline: bool,
    aliases: tuple[str, ...] = (),
) -> RemotePreset | SingleModel:
    """What ``-hf text`` means, decided before anything runs. Blocking (network)."""
    try:
        spec = parse_model_spec(text)
    except InvalidModelName as exc:
        raise HfSourceError(f"-hf {text!r}: {exc}") from None
    if offline:
        return _offline(spec, hf_file, repos, aliases, "offline")
    try:
        if is_preset_repo(_root_files(spec.repo, endpoint, token)):
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(
                spec.repo, PRESET_FILE, cache_dir=str(cache_dir), endpoint=endpoint, token=token or False
            )
            return RemotePreset(spec.repo, Path(path))
        resolution = resolve(spec, endpoint=endpoint, token=token, hf_file=hf_file)
    except ResolutionError as exc:
        if exc.code != "network":
            raise HfSourceError(f"-hf {text}: {exc.message}") from None
        return _offline(spec, hf_file, repos, aliases, exc.message)
    except Exception as exc:  # the tree listing's own errors: transport, or the Hub's answer
        origin = type(exc).__module__.split(".")[0]
        if isinstance(exc, OSError) or origin in _TRANSPORTS:
            return _offline(spec, hf_file, repos, aliases, f"the Hub is unreachable ({type(exc).__name__})")
        if origin == "huggingface_hub":
            raise HfSourceError(f"-hf {text}: {exc}") from None
        raise
    return _single(spec, resolution.canonical_name, hf_file, repos, aliases)
