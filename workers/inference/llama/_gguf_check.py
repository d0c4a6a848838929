"""Cheap structural pre-check of a GGUF file before llama.cpp sees it.

Why: llama.cpp reports every bad file as the same generic "failed to load
model". Walking the header ourselves (magic, version, key/values, tensor
infos, and whether the tensor data fits inside the file) turns that into an
actionable reason: ``file_missing``, ``not_gguf``, ``truncated`` or
``corrupt``. The walk reads only the header through ``mmap`` (pages are
faulted in lazily), so a 40 GB file costs a few milliseconds, not 40 GB of
RAM. Array values (vocabularies of 150k strings) are skipped, not decoded.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from service.core.model_shape import TENSOR_PARTS

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
SUPPORTED_VERSIONS = (2, 3)
MAX_COUNT = 10_000_000

# GGUF value type id -> struct format of a fixed-size scalar (little endian).
_SCALAR_FMT: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


class GGUFCheckError(Exception):
    """The file is unusable; ``reason`` is one of the worker's load-failure reasons."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class _OutOfBytes(Exception):
    """The header walk ran past end of file."""


GgufMetadata = dict[str, Any]
"""A GGUF header's key-value pairs (scalars and strings only): free-form, any key a converter wrote."""


@dataclass(frozen=True)
class GGUFInfo:
    """What the pre-check learned; ``metadata`` holds scalar/string keys only."""

    path: Path
    file_size: int
    version: int
    n_tensors: int
    n_kv: int
    data_offset: int
    data_end: int
    metadata: GgufMetadata = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)  # each array key's item count (the vocabulary's)
    tensor_parts: dict[str, int] = field(default_factory=dict)  # model_shape.TENSOR_PARTS: where llama.cpp puts them

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None


class _Cursor:
    """Bounds-checked little-endian reader over a buffer."""

    def __init__(self, buf: mmap.mmap | bytes) -> None:
        self.buf = buf
        self.pos = 0
        self.size = len(buf)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise _OutOfBytes()
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise _OutOfBytes()
        self.pos += n

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        return self.take(n).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.skip(self.unpack("<Q"))


def _read_value(cur: _Cursor, vtype: int, *, keep: bool) -> Any:
    """Read (or skip, for arrays) one value of GGUF type ``vtype``."""
    if vtype in _SCALAR_FMT:
        return cur.unpack(_SCALAR_FMT[vtype])
    if vtype == _STRING:
        return cur.string() if keep else cur.skip_string()
    if vtype == _ARRAY:
        item_type = cur.unpack("<I")
        count = cur.unpack("<Q")
        if item_type in _SCALAR_FMT:
            cur.skip(count * struct.calcsize(_SCALAR_FMT[item_type]))
        elif item_type == _STRING:
            if count > MAX_COUNT:  # vocabularies are ~10^5; a cut file hits EOF instead
                raise GGUFCheckError("corrupt", f"implausible array of {count} strings")
            for _ in range(count):
                cur.skip_string()
        elif item_type == _ARRAY:
            for _ in range(count):
                _read_value(cur, _ARRAY, keep=False)
        else:
            raise GGUFCheckError("corrupt", f"unknown GGUF array item type {item_type}")
        return None
    raise GGUFCheckError("corrupt", f"unknown GGUF value type {vtype}")


def _tensor_nbytes(ggml_type: int, dims: list[int]) -> int | None:
    """Byte size of a tensor, or None for a type this gguf package doesn't know."""
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None
    n = 1
    for d in dims:
        n *= d
    return n // block * type_size


def _walk(cur: _Cursor, path: Path, size: int) -> GGUFInfo:
    if cur.take(4) != GGUF_MAGIC:
        raise GGUFCheckError("not_gguf", f"{path.name}: bad magic, not a GGUF file")
    version = cur.unpack("<I")
    if version not in SUPPORTED_VERSIONS:
        raise GGUFCheckError("corrupt", f"unsupported GGUF version {version} (or big-endian file)")
    n_tensors = cur.unpack("<Q")
    n_kv = cur.unpack("<Q")
    # Real files have at most tens of thousands of each; beyond this it is
    # garbage, not truncation (a cut file keeps its counts and hits EOF below).
    if n_tensors > MAX_COUNT or n_kv > MAX_COUNT:
        raise GGUFCheckError("corrupt", f"implausible header counts (tensors={n_tensors}, kv={n_kv})")
    metadata: GgufMetadata = {}
    lengths: dict[str, int] = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.unpack("<I")
        if vtype == _ARRAY and cur.pos + 12 <= cur.size:  # item type, then count
            lengths[key] = int(struct.unpack_from("<Q", cur.buf, cur.pos + 4)[0])
        value = _read_value(cur, vtype, keep=True)
        if value is not None:
            metadata[key] = value
    tensors: list[tuple[str, int, int | None]] = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("<I")
        if n_dims > 8:
            raise GGUFCheckError("corrupt", f"tensor {name!r} has {n_dims} dimensions")
        dims = [cur.unpack("<Q") for _ in range(n_dims)]
        ggml_type = cur.unpack("<I")
        offset = cur.unpack("<Q")
        tensors.append((name, offset, _tensor_nbytes(ggml_type, dims)))
    align = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise GGUFCheckError("corrupt", f"invalid general.alignment {align!r}")
    data_offset = (cur.pos + align - 1) // align * align
    data_end = data_offset
    for name, offset, nbytes in tensors:
        if nbytes is None:
            continue  # unknown quant type: let llama.cpp judge it
        end = data_offset + offset + nbytes
        if end > size:
            raise GGUFCheckError(
                "truncated",
                f"tensor {name!r} ends at byte {end} but the file has {size} bytes "
                f"({end - size} missing): incomplete download?",
            )
        data_end = max(data_end, end)
    parts = {
        TENSOR_PARTS[0]: sum(n or 0 for name, _, n in tensors if name == "token_embd.weight"),
        TENSOR_PARTS[1]: sum(n or 0 for name, _, n in tensors if name == "output.weight"),
        TENSOR_PARTS[2]: sum(n or 0 for name, _, n in tensors if name.startswith("blk.")),
    }
    return GGUFInfo(path, size, version, n_tensors, n_kv, data_offset, data_end, metadata, lengths, parts)


def inspect_gguf(path: str | os.PathLike[str]) -> GGUFInfo:
    """Validate ``path`` structurally; raise :class:`GGUFCheckError` with a reason."""
    p = Path(path)
    if p.is_dir():
        raise GGUFCheckError("file_missing", f"model path is a directory: {p}")
    try:
        fd = os.open(p, os.O_RDONLY)
    except FileNotFoundError:
        raise GGUFCheckError("file_missing", f"model file not found: {p}") from None
    except OSError as exc:
        raise GGUFCheckError("load_error", f"cannot open {p}: {exc.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        if size < 4:
            reason = "truncated" if GGUF_MAGIC.startswith(os.pread(fd, size, 0)) else "not_gguf"
            raise GGUFCheckError(reason, f"{p.name}: only {size} bytes")
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
            try:
                return _walk(_Cursor(mm), p, size)
            except _OutOfBytes:
                raise GGUFCheckError(
                    "truncated", f"{p.name}: GGUF header ends past end of file ({size} bytes)"
                ) from None
            except UnicodeDecodeError as exc:  # pragma: no cover - decode uses errors="replace"
                raise GGUFCheckError("corrupt", f"{p.name}: {exc}") from None
    finally:
        os.close(fd)
