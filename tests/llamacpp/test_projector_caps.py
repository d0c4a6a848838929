"""``GET /models``' ``input_modalities`` come from the projector's header, as llama.cpp's router
reads them (``mtmd_get_cap_from_file``): the tiny vision and audio projectors, a file that is no
GGUF yet, and a projector replaced in place."""

from __future__ import annotations

import os
from pathlib import Path

from devtools.tiny_audio_mmproj import write_tiny_audio_mmproj
from devtools.tiny_mmproj import write_tiny_mmproj
from service.llamacpp.projector_caps import UNREAD, ProjectorCaps, projector_caps


def test_the_header_says_what_the_projector_takes(tmp_path: Path) -> None:
    vision = write_tiny_mmproj(tmp_path / "mmproj-v.gguf")
    audio = write_tiny_audio_mmproj(tmp_path / "mmproj-a.gguf")
    assert projector_caps(str(vision)) == ProjectorCaps(vision=True, audio=False)
    assert projector_caps(str(audio)) == ProjectorCaps(vision=False, audio=True)


def test_an_unreadable_projector_is_listed_as_taking_images(tmp_path: Path) -> None:
    (tmp_path / "partial.gguf").write_bytes(b"GG")
    assert projector_caps(str(tmp_path / "partial.gguf")) == UNREAD
    assert projector_caps(str(tmp_path / "missing.gguf")) == UNREAD


def test_a_replaced_projector_is_read_again(tmp_path: Path) -> None:
    path = write_tiny_mmproj(tmp_path / "mmproj.gguf")
    assert projector_caps(str(path)).vision
    write_tiny_audio_mmproj(path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new version, whatever the clock
    assert projector_caps(str(path)) == ProjectorCaps(vision=False, audio=True)
