"""The prompt cache's files on disk (issue 35): their format, their names, and which to write or drop.

One file per entry, ``<prefix_sha256[:16]>.lcache`` in the model's directory::

    b"MRPCACH1"  u32 header length (little-endian)  header (JSON, UTF-8)
    the tokens (int32, little-endian)  the sequence's state (llama_state_seq_get_data's bytes)

The header holds ``model_sha256``, ``settings`` (what the state's layout depends on), ``tokens`` (their
count), ``prefix_sha256`` (sha256 of the tokens' int32 bytes) and ``state_bytes``: a file checks itself
without the event log. Why our own file rather than ``llama_state_seq_save_file``'s: that format has
no room for the header, and the RAM prompt cache holds the same bytes ``llama_state_seq_get_data`` gives,
so a restore is one read into the cache, the KV cache untouched until a request takes the entry.

A save writes ``<name>.tmp-<pid>``, fsyncs it, renames it, then fsyncs the directory: a file with the
final name is whole. A ``*.tmp-*`` found later is a save cut off by a crash: it is deleted unread.
Pure but for the file reads and writes; no llama.cpp here.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"MRPCACH1"
SUFFIX = ".lcache"
TMP_MARK = ".tmp-"
_LEN = struct.Struct("<I")

Settings = Mapping[str, Any]  # free-form: the context settings as prompt_cache_saved records them (llama.cpp's)


class CorruptFile(ValueError):
    """The file does not read back as a whole entry (bad magic, header, hash or size)."""


def prefix_sha256(tokens: Sequence[int]) -> str:
    """The hash that names an entry: sha256 of its token ids as little-endian int32."""
    return hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()


def file_name(prefix_hash: str) -> str:
    return prefix_hash[:16] + SUFFIX


@dataclass(frozen=True, slots=True)
class Header:
    """What a file says of itself; ``offset`` is where its state's bytes start."""

    path: Path
    model_sha256: str
    settings: Settings
    tokens: list[int]
    prefix_sha256: str
    state_bytes: int
    offset: int
    mtime: float

    @property
    def size(self) -> int:
        return self.offset + self.state_bytes


def write_entry(
    path: Path, model_sha256: str, settings: Settings, tokens: Sequence[int], state: Any
) -> tuple[int, str]:
    """Write one entry (``state``: any buffer) crash-safely; its size in bytes and its prefix hash."""
    digest = prefix_sha256(tokens)
    head = {
        "format": 1,
        "model_sha256": model_sha256,
        "settings": dict(settings),
        "tokens": len(tokens),
        "prefix_sha256": digest,
        "state_bytes": len(memoryview(state).cast("B")),
    }
    raw = json.dumps(head, sort_keys=True).encode()
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")
    try:
        with tmp.open("wb") as f:
            f.write(MAGIC + _LEN.pack(len(raw)) + raw)
            f.write(struct.pack(f"<{len(tokens)}i", *tokens))
            f.write(memoryview(state).cast("B"))
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return size, digest


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_header(path: Path) -> Header:
    """The file's header, its tokens checked against their hash and its size against the header's."""
    try:
        with path.open("rb") as f:
            start = f.read(len(MAGIC) + _LEN.size)
            if len(start) != len(MAGIC) + _LEN.size or not start.startswith(MAGIC):
                raise CorruptFile("not a prompt-cache file")
            (n_head,) = _LEN.unpack(start[len(MAGIC) :])
            head = json.loads(f.read(n_head))
            n = int(head["tokens"])
            raw = f.read(4 * n)
            if len(raw) != 4 * n:
                raise CorruptFile("short tokens")
            tokens = list(struct.unpack(f"<{n}i", raw))
            st = os.fstat(f.fileno())
        offset = len(MAGIC) + _LEN.size + n_head + 4 * n
        header = Header(
            path,
            str(head["model_sha256"]),
            dict(head["settings"]),
            tokens,
            str(head["prefix_sha256"]),
            int(head["state_bytes"]),
            offset,
            st.st_mtime,
        )
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        raise CorruptFile(f"{type(exc).__name__}: {exc}") from None
    if prefix_sha256(tokens) != header.prefix_sha256 or header.size != st.st_size:
        raise CorruptFile("hash or size differs from the header")
    return header


def read_state(header: Header, into: Any) -> None:
    """The state's bytes into the writable buffer ``into`` (``header.state_bytes`` long)."""
    with header.path.open("rb") as f:
        f.seek(header.offset)
        if f.readinto(memoryview(into).cast("B")) != header.state_bytes:
            raise CorruptFile("short state")


def mismatch(header: Header, model_sha256: str, settings: Settings) -> str | None:
    """Why the file cannot serve this worker (``prompt_cache_discarded``'s reason), or None."""
    if header.model_sha256 != model_sha256:
        return "model_changed"
    if dict(header.settings) != dict(settings):
        return "settings_changed"
    return None


@dataclass(frozen=True, slots=True)
class Candidate:
    """An entry the worker could save: its tokens, state size, and rank of recency (0: the oldest)."""

    tokens: list[int]
    size: int
    recency: int
    source: Any  # the slot or the RAM-cache entry it comes from

    def value(self, n: int) -> float:
        """Length times recency: a long prefix used lately is worth most."""
        return len(self.tokens) * (self.recency + 1) / max(1, n)


def ranked(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Most valuable first; an entry whose tokens another holds wholly is dropped (the longer serves it;
    of two equal ones, the more recent stays)."""

    def covered(c: Candidate) -> bool:
        n = len(c.tokens)
        return any(
            o is not c and o.tokens[:n] == c.tokens and (len(o.tokens) > n or o.recency > c.recency) for o in candidates
        )

    whole = [c for c in candidates if c.tokens and not covered(c)]
    return sorted(whole, key=lambda c: c.value(len(candidates)), reverse=True)


def within(candidates: Sequence[Candidate], max_bytes: int) -> list[Candidate]:
    """The ranked candidates that fit ``max_bytes`` together, best first (one too big is skipped)."""
    chosen, total = [], 0
    for c in candidates:
        if total + c.size <= max_bytes:
            chosen.append(c)
            total += c.size
    return chosen


def over_budget(files: Sequence[tuple[Path, int, float]], keep: set[Path], max_bytes: int) -> list[Path]:
    """Files (path, bytes, mtime) to delete, oldest first, until the directory fits ``max_bytes``;
    those in ``keep`` (just written) stay."""
    total = sum(size for _, size, _ in files)
    drop = []
    for path, size, _ in sorted(files, key=lambda f: f[2]):
        if total <= max_bytes:
            break
        if path in keep:
            continue
        drop.append(path)
        total -= size
    return drop


def listing(directory: Path) -> tuple[list[tuple[Path, int, float]], list[Path]]:
    """The directory's entry files (path, bytes, mtime) and its leftovers of crashed saves."""
    files, tmps = [], []
    for p in directory.iterdir():
        if TMP_MARK in p.name:
            tmps.append(p)
        elif p.name.endswith(SUFFIX):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((p, st.st_size, st.st_mtime))
    return files, tmps
