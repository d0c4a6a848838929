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
from service.core.model_shape import header_int, model_shape

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


def _tensor_parts(header: _Header, count: int, alignment: int, file_size: int) -> dict[str, int]:
    """The stored bytes of the token embeddings, the output projection and the repeating layers, from
    the tensor infos after the key/values (each tensor's size: the distance to the next one's offset,
    the last one's to the end of the file): :data:`~service.core.model_shape.TENSOR_PARTS` keys."""
    infos: list[tuple[int, str]] = []
    for _ in range(count):
        name = header.string()
        dims = int(header.take("<I"))
        header.at += 8 * dims + 4  # the dimensions and the ggml type: the offsets give the size
        infos.append((int(header.take("<Q")), name))
    start = -(-header.at // max(alignment, 1)) * max(alignment, 1)
    infos.sort()
    ends = [o for o, _ in infos[1:]] + [file_size - start]
    sizes = {name: end - offset for (offset, name), end in zip(infos, ends, strict=True)}
    return {
        "modelrouter.embedding_bytes": sizes.get("token_embd.weight", 0),
        "modelrouter.output_bytes": sizes.get("output.weight", 0),
        "modelrouter.layers_bytes": sum(size for name, size in sizes.items() if name.startswith("blk.")),
    }


def read_metadata(path: Path) -> dict[str, int | float | bool | str | None]:
    """The header's key/values (arrays as their length), and the sizes of the tensors' parts under
    ``modelrouter.*`` keys (:data:`~service.core.model_shape.TENSOR_PARTS`). Raises :class:`NotMeasurable`."""
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
            tensors = int(header.take("<Q"))
            count = int(header.take("<Q"))
            out: dict[str, int | float | bool | str | None] = {}
            for _ in range(count):
                key = header.string()
                out[key] = header.value(int(header.take("<I")))
            out.update(_tensor_parts(header, tensors, header_int(out, "general.alignment", 32), len(data)))
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
