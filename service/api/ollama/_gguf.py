"""What ``/api/tags`` and ``/api/show`` say about a model, read from its GGUF header.

Only the header is read (key/values and tensor infos, a few KB to a few MB), never the
weights; array values (vocabularies, merges) are skipped and shown as ``[]``, as Ollama's
non-verbose ``show`` does. Results are cached by (path, size, mtime), so listing models
reads each file once.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_COUNT = 10_000_000  # beyond any real header: a damaged file, not a model

# llama.cpp's llama_ftype (general.file_type) -> the quantization name Ollama shows.
_FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4",
}


class _Damaged(Exception):
    """The header ends early or holds impossible values."""


Metadata = dict[str, Any]
"""A GGUF header's key-value pairs: free-form, any key a converter wrote, of any GGUF type (shown as
``/api/show``'s ``model_info``)."""


@dataclass(frozen=True, slots=True)
class GgufFacts:
    """A model file's header, as far as Ollama's answers need it."""

    metadata: Metadata = field(default_factory=dict)
    parameter_count: int = 0

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else ""

    @property
    def quantization(self) -> str:
        """The file type's name (``Q4_K_M``), or "" when the header does not say."""
        ftype = self.metadata.get("general.file_type")
        return _FILE_TYPES.get(ftype, "") if isinstance(ftype, int) else ""

    @property
    def context_length(self) -> int:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return value if isinstance(value, int) else 0

    @property
    def chat_template(self) -> str:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else ""


def _take(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Damaged
    return data


def _unpack(f: BinaryIO, fmt: str) -> Any:  # Any: struct's values are int, float or bool by format
    return struct.unpack(fmt, _take(f, struct.calcsize(fmt)))[0]


def _count(f: BinaryIO) -> int:
    n: int = _unpack(f, "<Q")
    if n > _MAX_COUNT * 100:
        raise _Damaged
    return n


def _string(f: BinaryIO) -> str:
    return _take(f, _count(f)).decode("utf-8", errors="replace")


def _value(f: BinaryIO, vtype: int) -> Any:  # Any: a GGUF value is a number, a bool, a string or []
    if vtype in _SCALAR:
        return _unpack(f, _SCALAR[vtype])
    if vtype == _STRING:
        return _string(f)
    if vtype != _ARRAY:
        raise _Damaged
    item, count = _unpack(f, "<I"), _count(f)
    if item in _SCALAR:
        f.seek(count * struct.calcsize(_SCALAR[item]), os.SEEK_CUR)
    else:
        for _ in range(count):
            _value(f, item)
    return []


def _read(path: str) -> GgufFacts:
    with open(path, "rb") as f:
        if _take(f, 4) != b"GGUF" or _unpack(f, "<I") not in (2, 3):
            return GgufFacts()
        n_tensors, n_kv = _count(f), _count(f)
        if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
            raise _Damaged
        metadata = {}
        for _ in range(n_kv):
            key = _string(f)
            metadata[key] = _value(f, _unpack(f, "<I"))
        params = 0
        for _ in range(n_tensors):
            _string(f)
            dims = [_unpack(f, "<Q") for _ in range(_unpack(f, "<I"))]
            f.seek(12, os.SEEK_CUR)  # type (u32) and offset (u64)
            params += functools.reduce(lambda a, b: a * b, dims, 1)
    declared = metadata.get("general.parameter_count")
    return GgufFacts(metadata, declared if isinstance(declared, int) and declared > 0 else params)


@functools.lru_cache(maxsize=256)
def _cached(path: str, size: int, mtime_ns: int) -> GgufFacts:
    del size, mtime_ns  # the cache key: a replaced file is read again
    try:
        return _read(path)
    except (_Damaged, OSError, UnicodeDecodeError, struct.error):
        return GgufFacts()


def gguf_facts(path: str | None) -> GgufFacts:
    """The header of the GGUF at ``path`` (empty facts for no path, or a missing or damaged file:
    listing models must not fail because one file is bad; loading it says why)."""
    if not path:
        return GgufFacts()
    try:
        st = os.stat(path)
    except OSError:
        return GgufFacts()
    return _cached(os.path.realpath(path), st.st_size, st.st_mtime_ns)


def parameter_size(count: int) -> str:
    """Ollama's ``parameter_size``: ``7.6B``, ``494.03M``, ``135K``."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            text = f"{count / scale:.2f}".rstrip("0").rstrip(".") if unit == "M" else f"{count / scale:.1f}"
            return text + unit
    return str(count)
