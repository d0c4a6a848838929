"""On-disk repositories served by the fake Hub (:mod:`devtools.hub_server`).

Layout under a root directory::

    <root>/<user>/<repo>/repo.json        metadata (commit, flags, per-file sha256)
    <root>/<user>/<repo>/files/<path>     the file bytes

``repo.json`` stores every file's size and sha256 so a server start never
re-hashes gigabytes. Content is generated deterministically (same repo id and
path give the same bytes, hence the same sha256 run after run), which keeps
benchmarks and cached fixtures reproducible.

Used by tests, benchmarks and the offline demo; never by the service itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

BLOCK = 1 << 20
_LFS_SUFFIXES = (".gguf", ".bin", ".safetensors", ".pt", ".onnx")
_GGUF_HEADER = b"GGUF\x03\x00\x00\x00"  # magic + version 3, so sniffers see a GGUF


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file of a repo. ``oid`` is the git blob id the Hub reports in tree listings
    (for LFS files: the id of the pointer file); the download ETag is ``sha256``
    for LFS files and ``oid`` otherwise (as on huggingface.co)."""

    path: str
    size: int
    sha256: str
    oid: str
    lfs: bool = True

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid

    @property
    def pointer_size(self) -> int:
        return len(_lfs_pointer(self.sha256, self.size))


@dataclass(frozen=True, slots=True)
class RepoInfo:
    """A repository as stored in ``repo.json``.

    ``gated`` is False, "auto" or "manual" (the Hub's values). A gated repo's
    metadata is public but ``/resolve`` needs ``token``; a private repo needs
    ``token`` for everything. ``refs`` maps branch names to ``commit``.
    """

    repo_id: str
    commit: str
    files: tuple[HubFile, ...]
    gated: bool | str = False
    private: bool = False
    token: str | None = None
    refs: Mapping[str, str] = field(default_factory=dict)

    def file(self, path: str) -> HubFile | None:
        for f in self.files:
            if f.path == path:
                return f
        return None

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def repo_dir(root: str | Path, repo_id: str) -> Path:
    user, name = repo_id.split("/", 1)
    return Path(root) / user / name


def file_path(root: str | Path, repo_id: str, path: str) -> Path:
    """Where the bytes of ``path`` live; refuses paths escaping the repo."""
    base = (repo_dir(root, repo_id) / "files").resolve()
    target = (base / path).resolve()
    if base not in target.parents:
        raise ValueError(f"path {path!r} escapes the repository")
    return target


def make_repo(
    root: str | Path,
    repo_id: str,
    files: Mapping[str, int | bytes | Path],
    *,
    gated: bool | str = False,
    private: bool = False,
    token: str | None = None,
    commit: str | None = None,
    branches: tuple[str, ...] = ("main",),
) -> RepoInfo:
    """Create (or replace) ``repo_id`` under ``root`` and return its metadata.

    ``files`` maps a path to a size (pseudo-random deterministic bytes,
    generated in 1 MiB blocks so 1 GB takes seconds), literal bytes, or a
    ``Path`` to serve (hard-linked when it can be, else copied; a file already
    in place is only hashed). Files
    with a model-like suffix (``.gguf``, ``.safetensors``...) are LFS files;
    others are plain git files, as on the Hub. ``commit`` defaults to a hash of
    the content, so identical repos get identical commits.
    """
    if gated is True:
        gated = "manual"
    rdir = repo_dir(root, repo_id)
    (rdir / "files").mkdir(parents=True, exist_ok=True)
    entries = []
    for path, spec in sorted(files.items()):
        dst = file_path(root, repo_id, path)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, Path):
            sha256, size = _place_file(spec, dst)
        elif isinstance(spec, (bytes, bytearray)):
            data = bytes(spec)
            dst.write_bytes(data)
            sha256, size = hashlib.sha256(data).hexdigest(), len(data)
        else:
            sha256, size = _write_generated(dst, int(spec), seed=f"{repo_id}/{path}", gguf=path.endswith(".gguf"))
        lfs = path.lower().endswith(_LFS_SUFFIXES) or not isinstance(spec, (bytes, bytearray))
        oid = _git_blob_oid(_lfs_pointer(sha256, size) if lfs else dst.read_bytes())
        entries.append(HubFile(path=path, size=size, sha256=sha256, oid=oid, lfs=lfs))
    if commit is None:
        h = hashlib.sha1(repo_id.encode())
        for e in entries:
            h.update(f"\0{e.path}\0{e.sha256}".encode())
        commit = h.hexdigest()
    info = RepoInfo(
        repo_id=repo_id,
        commit=commit,
        files=tuple(entries),
        gated=gated,
        private=private,
        token=token,
        refs={b: commit for b in branches},
    )
    _write_json_atomic(rdir / "repo.json", _to_json(info))
    return info


def load_repo(root: str | Path, repo_id: str) -> RepoInfo | None:
    """Read ``repo.json``; None when the repo does not exist."""
    try:
        meta = json.loads((repo_dir(root, repo_id) / "repo.json").read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return RepoInfo(
        repo_id=meta["repo_id"],
        commit=meta["commit"],
        files=tuple(HubFile(**f) for f in meta["files"]),
        gated=meta.get("gated", False),
        private=meta.get("private", False),
        token=meta.get("token"),
        refs=dict(meta.get("refs", {})),
    )


def list_repos(root: str | Path) -> list[RepoInfo]:
    out = []
    for meta in sorted(Path(root).glob("*/*/repo.json")):
        info = load_repo(root, f"{meta.parent.parent.name}/{meta.parent.name}")
        if info is not None:
            out.append(info)
    return out


def generated_bytes(repo_id: str, path: str, size: int) -> bytes:
    """The bytes :func:`make_repo` writes for a size-only file (handy for small assertions)."""
    return b"".join(_generated_blocks(size, seed=f"{repo_id}/{path}", gguf=path.endswith(".gguf")))


def _generated_blocks(size: int, *, seed: str, gguf: bool) -> Iterator[bytes]:
    # One random 1 MiB block, with each copy stamped by its index so no two
    # blocks are equal: a resume at a wrong block-aligned offset must change
    # the sha256 instead of going unnoticed.
    seed_digest = hashlib.sha256(seed.encode()).digest()
    base = random.Random(seed_digest).randbytes(BLOCK)
    done, index = 0, 0
    while done < size:
        stamp = index.to_bytes(8, "little") + seed_digest[:8]
        block = (stamp + base[len(stamp) :])[: size - done]
        if index == 0 and gguf:
            block = (_GGUF_HEADER + block[len(_GGUF_HEADER) :])[: len(block)]
        yield block
        done += len(block)
        index += 1


def _write_generated(dst: Path, size: int, *, seed: str, gguf: bool) -> tuple[str, int]:
    h = hashlib.sha256()
    with open(dst, "wb") as f:
        for block in _generated_blocks(size, seed=seed, gguf=gguf):
            h.update(block)
            f.write(block)
    return h.hexdigest(), size


def _place_file(src: Path, dst: Path) -> tuple[str, int]:
    if not (dst.exists() and os.path.samefile(src, dst)):
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)
        except OSError:  # another filesystem
            shutil.copyfile(src, dst)
    h = hashlib.sha256()
    with open(dst, "rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
    return h.hexdigest(), dst.stat().st_size


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _to_json(info: RepoInfo) -> dict[str, object]:
    d = asdict(info)
    d["files"] = [asdict(f) for f in info.files]
    d["refs"] = dict(info.refs)
    return d


def _write_json_atomic(path: Path, data: object) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.hub_repos --root DIR user/repo PATH=SIZE|PATH=@FILE ... [--gated --token T]``

    Creates a repo for the hub server from a shell (``make demo``): ``=SIZE``
    generates that many bytes, ``=@FILE`` copies a real file (e.g. a tiny GGUF).
    Prints the repo's commit and files as JSON.
    """
    import argparse

    p = argparse.ArgumentParser(prog="python -m devtools.hub_repos", description="Create a fake Hub repo.")
    p.add_argument("--root", required=True, type=Path)
    p.add_argument("repo")
    p.add_argument("files", nargs="+", metavar="PATH=SIZE|PATH=@FILE")
    p.add_argument("--gated", action="store_true")
    p.add_argument("--private", action="store_true")
    p.add_argument("--token")
    args = p.parse_args(argv)
    files: dict[str, int | bytes] = {}
    for item in args.files:
        path, _, value = item.partition("=")
        files[path] = Path(value[1:]).read_bytes() if value.startswith("@") else int(value)
    info = make_repo(args.root, args.repo, files, gated=args.gated, private=args.private, token=args.token)
    print(json.dumps({"repo": info.repo_id, "commit": info.commit, "files": [asdict(f) for f in info.files]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
