"""A GGUF header's facts for the memory estimate (``model_measured``), read once per file.

Why our own walk rather than ``gguf.GGUFReader``: the reader decodes every
array (a 150k-token vocabulary is 150k Python objects); the estimate needs a
dozen scalars and the vocabulary's *length*. The walk reads the key/values
through ``mmap`` and skips array bodies, so a 40 GB file costs milliseconds.
"""

from __future__ import annotations

import dataclasses
import mmap
import stat
import struct
from pathlib import Path

from service.core import events as ev
from service.core.model_shape import model_shape

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class NotMeasurable(Exception):
    """The file is not a GGUF whose header we can read (the model is placed by count alone)."""


class _Header:
    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int | float | bool:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            msg = "the header runs past the end of the file"
            raise NotMeasurable(msg)
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return value  # type: ignore[no-any-return]  # struct's formats above give int, float or bool

    def string(self) -> str:
        length = int(self.take("<Q"))
        text = bytes(self.data[self.at : self.at + length]).decode("utf-8", "replace")
        self.at += length
        return text

    def value(self, kind: int) -> int | float | bool | str | None:
        """A scalar or string; an array answers its length (its items are skipped)."""
        if kind in _SCALAR:
            return self.take(_SCALAR[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = int(self.take("<I")), int(self.take("<Q"))
            if item in _SCALAR:
                self.at += struct.calcsize(_SCALAR[item]) * count
            else:
                for _ in range(count):
                    self.value(item)
            return count
        msg = f"unknown GGUF value type {kind}"
        raise NotMeasurable(msg)


def read_metadata(path: Path) -> dict[str, int | float | bool | str | None]:
    """The header's key/values (arrays as their length). Raises :class:`NotMeasurable`."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO or device would block the open, or never end
            msg = f"{path} is not a regular file"
            raise NotMeasurable(msg)
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[:4] != b"GGUF":
                msg = f"{path} is not a GGUF file"
                raise NotMeasurable(msg)
            header = _Header(data)
            header.at = 8  # magic, version
            header.take("<Q")  # tensor count
            count = int(header.take("<Q"))
            out: dict[str, int | float | bool | str | None] = {}
            for _ in range(count):
                key = header.string()
                out[key] = header.value(int(header.take("<I")))
            return out
    except (OSError, ValueError) as exc:
        raise NotMeasurable(str(exc)) from exc


def measure(path: Path, weights_bytes: int) -> ev.ModelMeasured:
    """``model_measured`` for the GGUF at ``path`` (its first part, for a split model) whose files
    total ``weights_bytes``. Raises :class:`NotMeasurable`."""
    shape = model_shape(str(path), weights_bytes, read_metadata(path))
    if shape is None:
        msg = f"{path} names no general.architecture"
        raise NotMeasurable(msg)
    return ev.ModelMeasured(**{f.name: getattr(shape, f.name) for f in dataclasses.fields(shape)})
