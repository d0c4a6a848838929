"""Model names (``user/repo[:QUANT][@revision]``) and the choice of GGUF files.

Pure: stdlib only, no I/O. Used by the API (validate a name before anything is
queued), by :mod:`service.downloads.resolution` (turn a repo listing into the
files to fetch) and by anything that needs the canonical name of a model.

The file-choice rules follow llama.cpp's ``-hf user/repo[:quant]`` (see
``common/model-resolution.cpp`` upstream) so that a model named here resolves
to the same files llama.cpp itself would pick:

* the quant tag is matched case-insensitively in the file path;
* without a tag: ``Q4_K_M``, else ``Q8_0``, else the first model ``.gguf``;
* a split model (``-00001-of-00003.gguf``) brings all of its parts;
* a multimodal projector (``mmproj*.gguf``) in the model's directory or above
  is added, preferring the one whose quant matches the model's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

DEFAULT_QUANTS: tuple[str, ...] = ("Q4_K_M", "Q8_0")

# Hugging Face's own rule (huggingface_hub.utils.validate_repo_id): word chars,
# '-' and '.', starting and ending with a word char, at most 96 chars in all.
_SEGMENT = r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?"
_REPO_RE = re.compile(rf"^{_SEGMENT}/{_SEGMENT}$")
_QUANT_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_\-]*[A-Za-z0-9_])?$")
# Branch, tag or commit; '/' allowed for names such as "refs/pr/1".
_REVISION_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.\-/]*[A-Za-z0-9_])?$")
_HOST_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/")
_MAX_REPO_LEN = 96
_MAX_QUANT_LEN = 64
_MAX_REVISION_LEN = 255

_SPLIT_RE = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG_RE = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
# Files that are .gguf but not a model to run (llama.cpp's gguf_filename_is_model).
_NON_MODEL_MARKERS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-")


class InvalidModelName(ValueError):
    """The text is not a valid ``user/repo[:QUANT][@revision]``; the message says why."""


class ModelFileError(LookupError):
    """The repository listing does not contain what the name asks for."""


class NoGgufFiles(ModelFileError):
    """The repository has no usable GGUF model file."""


class IncompleteSplit(NoGgufFiles):
    """A split GGUF is missing some of its ``-0000k-of-0000N`` parts."""


class QuantNotFound(ModelFileError):
    """No file matches the requested quant; ``available`` lists the quants that exist."""

    def __init__(self, quant: str, available: Sequence[str]) -> None:
        self.quant = quant
        self.available = tuple(available)
        listing = ", ".join(self.available) if self.available else "none"
        super().__init__(f"quant {quant!r} not found; available quants: {listing}")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed model name. ``quant`` is upper-case or None; ``revision`` None means "main"."""

    repo: str
    quant: str | None = None
    revision: str | None = None

    @property
    def user(self) -> str:
        return self.repo.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo.split("/", 1)[1]

    @property
    def canonical(self) -> str:
        """``user/repo:QUANT`` (or ``user/repo`` while no quant is known); revision excluded."""
        return f"{self.repo}:{self.quant}" if self.quant else self.repo

    def with_quant(self, quant: str | None) -> ModelSpec:
        """The same spec with the quant the resolver actually chose."""
        return ModelSpec(self.repo, quant.upper() if quant else None, self.revision)

    def __str__(self) -> str:
        return self.canonical + (f"@{self.revision}" if self.revision else "")


def parse_model_spec(text: str) -> ModelSpec:
    """Parse ``user/repo[:QUANT][@revision]``; raise :class:`InvalidModelName` with a reason.

    Surrounding whitespace and an ``hf.co/`` or ``huggingface.co/`` prefix (as
    in Ollama's ``hf.co/user/repo:Q4_K_M``) are accepted and dropped.
    """
    if not isinstance(text, str):
        raise InvalidModelName(f"model name must be a string, got {type(text).__name__}")
    raw = text.strip()
    if not raw:
        raise InvalidModelName("model name must be a non-empty string")
    for prefix in _HOST_PREFIXES:
        if raw.lower().startswith(prefix):
            raw = raw[len(prefix) :]
            break
    revision: str | None = None
    if "@" in raw:
        raw, revision = raw.split("@", 1)
        _check_revision(revision, text)
    quant: str | None = None
    if ":" in raw:
        raw, quant = raw.split(":", 1)
        _check_quant(quant, text)
    validate_repo_id(raw, original=text)
    return ModelSpec(repo=raw, quant=quant.upper() if quant else None, revision=revision)


def validate_repo_id(repo: str, *, original: str | None = None) -> None:
    """Raise :class:`InvalidModelName` unless ``repo`` is a valid ``user/repo`` id."""
    shown = original if original is not None else repo
    if repo.count("/") != 1:
        raise InvalidModelName(f"{shown!r}: expected 'user/repo' with exactly one '/'")
    if len(repo) > _MAX_REPO_LEN:
        raise InvalidModelName(f"{shown!r}: repo id longer than {_MAX_REPO_LEN} characters")
    if not _REPO_RE.match(repo):
        raise InvalidModelName(
            f"{shown!r}: user and repo may contain only letters, digits, '_', '-' and '.', "
            "and must start and end with a letter, digit or '_'"
        )
    if "--" in repo or ".." in repo:
        raise InvalidModelName(f"{shown!r}: '--' and '..' are not allowed in a repo id")
    if repo.endswith(".git"):
        raise InvalidModelName(f"{shown!r}: a repo id cannot end with '.git'")


def _check_quant(quant: str, original: str) -> None:
    if not quant:
        raise InvalidModelName(f"{original!r}: empty quant after ':'")
    if len(quant) > _MAX_QUANT_LEN or not _QUANT_RE.match(quant):
        raise InvalidModelName(
            f"{original!r}: quant {quant!r} may contain only letters, digits, '_' and '-' (e.g. Q4_K_M)"
        )


def _check_revision(revision: str, original: str) -> None:
    if not revision:
        raise InvalidModelName(f"{original!r}: empty revision after '@'")
    if ":" in revision:
        raise InvalidModelName(f"{original!r}: write the quant before the revision: user/repo:QUANT@revision")
    if len(revision) > _MAX_REVISION_LEN or not _REVISION_RE.match(revision) or ".." in revision:
        raise InvalidModelName(f"{original!r}: invalid revision {revision!r}")


# --- file choice ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a repo listing. ``sha256`` is None for non-LFS (git) files."""

    path: str
    size: int
    sha256: str | None = None


@dataclass(frozen=True, slots=True)
class SplitInfo:
    """What a ``.gguf`` file name says: ``prefix`` (path minus ``.gguf`` and split
    suffix), ``tag`` (upper-case quant, '' if none) and split ``index``/``count``."""

    prefix: str
    tag: str
    index: int = 1
    count: int = 1


@dataclass(frozen=True, slots=True)
class FileChoice:
    """The files to fetch for one model: all parts of the model plus an optional projector."""

    quant: str | None
    model_files: tuple[FileEntry, ...]
    mmproj: FileEntry | None = None

    @property
    def primary(self) -> FileEntry:
        """The file a loader is pointed at (the first split part)."""
        return self.model_files[0]

    @property
    def files(self) -> tuple[FileEntry, ...]:
        return self.model_files + ((self.mmproj,) if self.mmproj else ())


def split_info(path: str) -> SplitInfo | None:
    """Parse a GGUF path; None when it is not a ``.gguf`` file."""
    if not path.lower().endswith(".gguf"):
        return None
    prefix = path[: -len(".gguf")]
    index = count = 1
    m = _SPLIT_RE.match(prefix)
    if m:
        prefix, index, count = m.group(1), int(m.group(2)), int(m.group(3))
    t = _TAG_RE.search(prefix)
    return SplitInfo(prefix=prefix, tag=t.group(1).upper() if t else "", index=index, count=count)


def is_model_gguf(path: str) -> bool:
    """A runnable model file: ``.gguf`` and not a projector, imatrix or draft sidecar."""
    if not path.lower().endswith(".gguf"):
        return False
    base = path.rsplit("/", 1)[-1].lower()
    return not any(marker in base for marker in _NON_MODEL_MARKERS)


def available_quants(files: Iterable[FileEntry]) -> tuple[str, ...]:
    """Sorted distinct quant tags of the model files (what a user could ask for)."""
    tags = set()
    for f in files:
        info = split_info(f.path)
        if info and info.tag and is_model_gguf(f.path):
            tags.add(info.tag)
    return tuple(sorted(tags))


def choose_files(files: Iterable[FileEntry], quant: str | None) -> FileChoice:
    """Pick the files for ``quant`` (None = default order) from a repo listing.

    Raises :class:`NoGgufFiles` when the repo has no model GGUF at all (or the
    chosen split is incomplete) and :class:`QuantNotFound` when ``quant`` is
    given but matches nothing.
    """
    listing = sorted(files, key=lambda f: f.path)
    heads = [f for f in listing if is_model_gguf(f.path) and _is_first_part(f.path)]
    if not heads:
        raise NoGgufFiles("the repository contains no GGUF model file")
    wanted = [quant.upper()] if quant else list(DEFAULT_QUANTS)
    primary: FileEntry | None = None
    for q in wanted:
        primary = _match_quant(heads, q)
        if primary is not None:
            break
    if primary is None:
        if quant:
            raise QuantNotFound(quant.upper(), available_quants(listing))
        primary = heads[0]
    info = split_info(primary.path)
    assert info is not None  # heads only holds .gguf files
    parts = _split_parts(listing, primary, info)
    chosen_quant = quant.upper() if quant else (info.tag or None)
    mmproj = _best_mmproj(listing, primary.path, chosen_quant)
    return FileChoice(quant=chosen_quant, model_files=parts, mmproj=mmproj)


def choose_file(files: Iterable[FileEntry], path: str) -> FileChoice:
    """The files for one named file (``--hf-file``): it, the other parts of its
    split, and its projector. Raises :class:`NoGgufFiles` when it is not there."""
    listing = sorted(files, key=lambda f: f.path)
    primary = next((f for f in listing if f.path == path), None)
    info = split_info(path)
    if primary is None or info is None:
        raise NoGgufFiles(f"the repository has no GGUF file {path!r}")
    parts = _split_parts(listing, primary, info)
    quant = info.tag or None
    return FileChoice(quant=quant, model_files=parts, mmproj=_best_mmproj(listing, primary.path, quant))


def _is_first_part(path: str) -> bool:
    info = split_info(path)
    return info is not None and (info.count <= 1 or info.index == 1)


def _match_quant(heads: Sequence[FileEntry], quant: str) -> FileEntry | None:
    # Exact tag first, so "Q4_K" never picks "Q4_K_M" and "Q4_XS" prefers
    # "model-Q4_XS" over "model-IQ4_XS"; then llama.cpp's looser
    # "<quant>[.-]" search (which also finds quants named in a directory).
    for f in heads:
        info = split_info(f.path)
        if info is not None and info.tag == quant:
            return f
    pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?=[./-])", re.IGNORECASE)
    for f in heads:
        if pattern.search(f.path):
            return f
    return None


def _split_parts(listing: Sequence[FileEntry], primary: FileEntry, info: SplitInfo) -> tuple[FileEntry, ...]:
    if info.count <= 1:
        return (primary,)
    parts = {}
    for f in listing:
        other = split_info(f.path)
        if other is not None and other.count == info.count and other.prefix == info.prefix:
            parts[other.index] = f
    missing = [i for i in range(1, info.count + 1) if i not in parts]
    if missing:
        raise IncompleteSplit(f"split model {primary.path!r} is missing part(s) {missing} of {info.count}")
    return tuple(parts[i] for i in range(1, info.count + 1))


def _quant_bits(tag: str | None) -> int:
    m = re.search(r"[0-9]+", tag or "")
    return int(m.group(0)) if m else 0


def _best_mmproj(listing: Sequence[FileEntry], model_path: str, quant: str | None) -> FileEntry | None:
    # Candidates live in the model's directory or one of its ancestors (a
    # projector in a sibling quant directory belongs to another model); the
    # deepest wins, then an exact quant match, then the closest bit width.
    model_dirs = model_path.split("/")[:-1]
    model_bits = _quant_bits(quant)
    best: tuple[tuple[int, int, int], FileEntry] | None = None
    for f in listing:
        base = f.path.rsplit("/", 1)[-1].lower()
        if not base.endswith(".gguf") or "mmproj" not in base:
            continue
        dirs = f.path.split("/")[:-1]
        if dirs != model_dirs[: len(dirs)]:
            continue
        info = split_info(f.path)
        tag = info.tag if info else ""
        exact = bool(quant) and tag == quant
        rank = (len(dirs), 1 if exact else 0, -abs(_quant_bits(tag) - model_bits))
        if best is None or rank > best[0]:
            best = (rank, f)
    return best[1] if best else None


class _LocalFile(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def local_path(self) -> str: ...


def projector_path(files: Iterable[_LocalFile]) -> str | None:
    """The model's multimodal projector (an ``mmproj*.gguf`` among its files), if it has one.

    Not in ``fold_support`` with ``primary_path``: the fold does not use it (GET /models and
    the worker's ``--mmproj`` do), and the fold's code is fingerprinted (FOLD_VERSION)."""
    paths = sorted(f.local_path for f in files if f.path.endswith(".gguf") and "mmproj" in f.path.lower())
    return paths[0] if paths else None
