"""What a multimodal projector (``mmproj*.gguf``) takes: images, audio or both, from its header.

llama.cpp's router lists ``architecture.input_modalities`` from ``mtmd_get_cap_from_file``,
which reads ``clip.has_vision_encoder`` and ``clip.has_audio_encoder``. This reads the same
two keys (through :func:`service.llamacpp.gguf_shape.read_metadata`, which skips array
bodies), once per file version: ``GET /models`` renders every model on every call.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from service.llamacpp.gguf_shape import NotMeasurable, read_metadata


@dataclass(frozen=True)
class ProjectorCaps:
    vision: bool
    audio: bool


UNREAD = ProjectorCaps(vision=True, audio=False)
"""A projector whose header cannot be read (not downloaded yet, damaged): listed as taking
images, the common case; loading it says what is wrong."""


@functools.lru_cache(maxsize=256)
def _read(path: str, size: int, mtime_ns: int) -> ProjectorCaps:
    del size, mtime_ns  # the cache key: a replaced file is read again
    try:
        meta = read_metadata(Path(path))
    except NotMeasurable:
        return UNREAD
    return ProjectorCaps(
        vision=meta.get("clip.has_vision_encoder") is True, audio=meta.get("clip.has_audio_encoder") is True
    )


def projector_caps(path: str) -> ProjectorCaps:
    """The modalities of the projector at ``path`` (:data:`UNREAD` when it cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return UNREAD
    return _read(os.path.realpath(path), st.st_size, st.st_mtime_ns)
