"""Resolve a model name to a commit and the exact files (path, size, sha256) to fetch.

Runs in the service before a download job is queued, so a typo, a gated repo
or a missing quant is answered at once with a precise error instead of a
worker that fails later. The result is what the download worker receives as
its ``--spec``: it pins the commit, so every byte of the job comes from one
immutable revision even if the branch moves meanwhile.

Uses huggingface_hub's ``HfApi`` (``model_info`` for the commit and gating,
``list_repo_tree`` for sizes and sha256). ``HF_ENDPOINT`` and ``HF_TOKEN`` are
read from the environment *at call time*: huggingface_hub reads
``HF_ENDPOINT`` only when it is imported, which is too early for a service
whose settings can change in tests or per request. It is imported by the functions
that call the Hub, not by this module: the service's start does not need it (~0.1 s of
imports, with its HTTP stack), and ``warm_up`` loads it once the service serves.

Error mapping (``ResolutionError.code`` → ``status``):

=================  ======  ==================================================
invalid_name       400     not ``user/repo[:QUANT][@revision]``
repo_not_found     404     repo or revision missing (or private without access)
unauthorized       401/403 gated repo: 401 without a token, 403 with a token
                           that has no access; also a rejected token
no_gguf            422     the repo exists but holds no usable GGUF: the
                           request is well-formed, the target cannot serve
                           (404 would be confused with a missing repo)
quant_not_found    404     ``extra["available_quants"]`` lists what exists
network            424     the Hub could not be reached or answered 5xx.
                           Failed Dependency, not 502/503: our API reserves
                           5xx for its own faults, and this one is upstream
=================  ======  ==================================================
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from service.core.contracts import DownloadSpec, SpecFile
from service.core.events import FileRef
from service.core.model_spec import (
    FileChoice,
    FileEntry,
    InvalidModelName,
    ModelSpec,
    NoGgufFiles,
    QuantNotFound,
    available_quants,
    choose_file,
    choose_files,
    parse_model_spec,
)

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_TIMEOUT = 20.0

__all__ = ["FileEntry", "Resolution", "ResolutionError", "endpoint_from_env", "resolve", "token_from_env"]


class ResolutionError(Exception):
    """A name that cannot be turned into files; ``code``/``status`` as in the module table."""

    # extra: free-form members of the problem answered (RFC 9457 lets a problem carry any)
    def __init__(self, code: str, status: int, message: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.extra = dict(extra or {})


@dataclass(frozen=True, slots=True)
class Resolution:
    """What to download: ``revision`` as asked ("main" by default), ``commit`` it pointed to."""

    repo: str
    revision: str
    commit: str
    quant: str | None
    files: tuple[FileEntry, ...]
    endpoint: str = DEFAULT_ENDPOINT
    gated: bool = False
    available_quants: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def canonical_name(self) -> str:
        return ModelSpec(self.repo, self.quant).canonical

    def to_spec(self) -> DownloadSpec:
        """The download worker's job (no token: it comes from HF_TOKEN)."""
        files = [FileRef(path=f.path, size=f.size, sha256=f.sha256) for f in self.files]
        return worker_spec(self.repo, self.revision, self.commit, self.quant, self.endpoint, files)


def worker_spec(
    repo: str, revision: str, commit: str, quant: str | None, endpoint: str, files: Iterable[FileRef]
) -> DownloadSpec:
    """The worker's job, each file with the download URL huggingface_hub builds
    for it (pinned to the commit, so the job never mixes revisions)."""
    from huggingface_hub import hf_hub_url

    spec_files = tuple(
        SpecFile(f.path, f.size, f.sha256 or "", hf_hub_url(repo, f.path, revision=commit, endpoint=endpoint))
        for f in files
    )
    return DownloadSpec(repo, revision, commit, quant, endpoint, spec_files)


def warm_up() -> None:
    """Build huggingface_hub's shared HTTP client now (~30 ms: SSL context,
    certificates) instead of inside the first download request."""
    from huggingface_hub import get_session

    get_session()


def endpoint_from_env() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token_from_env() -> str | None:
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None


def _list_and_choose(
    spec: ModelSpec, revision: str, endpoint: str, token: str | None, timeout: float, hf_file: str | None
) -> tuple[str, list[FileEntry], FileChoice, bool]:
    """The commit ``revision`` points to, the repo's files there, the files to fetch, and whether the
    repo is gated (then one HEAD checks that the token may download them). Raises the Hub's errors."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=endpoint, token=token or False)
    info = api.model_info(spec.repo, revision=revision, timeout=timeout)
    commit = info.sha or ""
    entries = [
        FileEntry(path=item.path, size=int(item.size), sha256=item.lfs.sha256 if item.lfs else None)
        for item in api.list_repo_tree(spec.repo, revision=commit, recursive=True)
        if isinstance(item, RepoFile)
    ]
    choice = choose_file(entries, hf_file) if hf_file else choose_files(entries, spec.quant)
    gated = bool(info.gated)
    if gated:
        # Metadata of a gated repo is public; only the files are protected.
        url = hf_hub_url(spec.repo, choice.primary.path, revision=commit, endpoint=endpoint)
        get_hf_file_metadata(url, token=token or False, timeout=timeout, endpoint=endpoint)
    return commit, entries, choice, gated


def resolve(
    spec: ModelSpec | str,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    hf_file: str | None = None,
) -> Resolution:
    """Resolve ``spec`` against the Hub at ``endpoint`` (default: ``$HF_ENDPOINT``).
    ``hf_file`` (llama.cpp's ``--hf-file``) names the file instead of the quant.

    ``token`` defaults to ``$HF_TOKEN``; when neither is set, no token is sent
    (never one from a login file on disk: the service must behave the same on
    every machine). Blocking (network I/O): call it from a worker thread in
    async code. Raises :class:`ResolutionError`.
    """
    if isinstance(spec, str):
        try:
            spec = parse_model_spec(spec)
        except InvalidModelName as exc:
            raise ResolutionError("invalid_name", 400, str(exc)) from exc
    endpoint = (endpoint or endpoint_from_env()).rstrip("/")
    token = token or token_from_env()
    revision = spec.revision or "main"
    ctx = {"repo": spec.repo, "revision": revision}
    try:
        commit, entries, choice, gated = _list_and_choose(spec, revision, endpoint, token, timeout, hf_file)
    except QuantNotFound as exc:
        raise ResolutionError(
            "quant_not_found",
            404,
            f"{spec.repo}: {exc}",
            {**ctx, "quant": exc.quant, "available_quants": list(exc.available)},
        ) from exc
    except NoGgufFiles as exc:
        raise ResolutionError("no_gguf", 422, f"{spec.repo}: {exc}", ctx) from exc
    except Exception as exc:
        mapped = _map_hub_error(exc, spec, revision, bool(token))
        if mapped is None:
            raise
        raise mapped from exc
    missing = [f.path for f in choice.files if not f.sha256]
    if missing:
        # Every model file on the Hub is LFS; a file without sha256 cannot be verified.
        raise ResolutionError("no_gguf", 422, f"{spec.repo}: no sha256 for {missing} (not LFS files)", ctx)
    return Resolution(
        repo=spec.repo,
        revision=revision,
        commit=commit,
        quant=choice.quant,
        files=choice.files,
        endpoint=endpoint,
        gated=gated,
        available_quants=available_quants(entries),
    )


def _map_hub_error(exc: Exception, spec: ModelSpec, revision: str, had_token: bool) -> ResolutionError | None:
    """Translate a huggingface_hub / transport exception; None for anything else (a bug: re-raised)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    ctx: dict[str, Any] = {"repo": spec.repo, "revision": revision}  # free-form: the problem's members
    if isinstance(exc, GatedRepoError):
        status = 403 if had_token else 401
        hint = "this token has no access to it" if had_token else "set HF_TOKEN to a token with access"
        return ResolutionError("unauthorized", status, f"{spec.repo} is a gated repository: {hint}", ctx)
    if isinstance(exc, RevisionNotFoundError):
        return ResolutionError("repo_not_found", 404, f"{spec.repo}: revision {revision!r} not found", ctx)
    if isinstance(exc, RepositoryNotFoundError):
        hint = "" if had_token else " (if it is private, set HF_TOKEN)"
        return ResolutionError("repo_not_found", 404, f"repository {spec.repo} not found{hint}", ctx)
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        if status in (401, 403):
            return ResolutionError("unauthorized", status, f"{spec.repo}: the Hub refused the token ({status})", ctx)
        if status == 404:
            return ResolutionError("repo_not_found", 404, f"{spec.repo}: not found on the Hub", ctx)
        return ResolutionError(
            "network", 424, f"the Hub answered {status} for {spec.repo}", {**ctx, "upstream_status": status}
        )
    if isinstance(exc, OfflineModeIsEnabled):
        return ResolutionError("network", 424, "huggingface_hub is in offline mode (HF_HUB_OFFLINE)", ctx)
    if isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2"):
        return ResolutionError("network", 424, f"cannot reach the Hub: {type(exc).__name__}: {exc}", ctx)
    return None
