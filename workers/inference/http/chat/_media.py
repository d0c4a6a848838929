"""Media parts of a chat (``image_url``, ``input_audio``, ``input_video``/``video_url``) as llama-server reads them.

llama-server's ``oaicompat_content_load_media`` and ``handle_media``
(``tools/server/server-common.cpp``), in the same order and with the same words:

* ``data:<image|audio|video>/...;base64,<data>``: decoded; another media type is
  "Invalid uri format: ...", a URI that is not base64 "uri must be base64 encoded";
* ``http://`` / ``https://``: downloaded (at most 10 MB, 10 s), as llama-server does,
  else "Failed to download image";
* ``file://``: refused ("file:// URLs are not allowed unless --media-path is
  specified"; modelrouter has no ``--media-path``);
* anything else is raw base64, and decoding to nothing is "Invalid base64 value".

Base64 is decoded as llama-server's ``base64_decode`` does: up to the first
character outside the alphabet (or ``=``). Bytes that are not an image, audio or
video file llama.cpp reads are found later, by the projector ("Failed to load
image or audio file"; a video needs ``ffprobe`` and ``ffmpeg``, else the same words).
As in llama-server, the part's type only decides whether the model may take it:
libmtmd tells images, sounds and videos apart by their bytes. Every refusal is a
400 here; llama-server answers some of them (a failed download, bad raw base64)
with a 500.
"""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from workers.inference.http._errors import ApiError, too_long
from workers.inference.http._json import JsonObject
from workers.inference.llama import MediaError, MediaPrompt

MAX_DOWNLOAD = 10 * 1024 * 1024  # llama-server's common_remote_params.max_size for media
DOWNLOAD_TIMEOUT_S = 10.0
MEDIA_PARTS = {"image_url": "image", "input_audio": "audio", "video_url": "video", "input_video": "video"}
_B64 = re.compile(r"[A-Za-z0-9+/]*")
Media = list[tuple[str, bytes]]
"""A chat's media files in order, with their kind (``image``, ``audio``, ``video``)."""


class MediaInput(ApiError):
    """An image, audio or video part the model cannot take: llama-server's answer when it has no
    projector (or one without that modality); the legacy engine answers 501 instead."""

    def __init__(self, kind: str) -> None:
        super().__init__(
            400, f"{kind} input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
        )
        self.kind = kind


def lenient_b64decode(text: str) -> bytes:
    """llama-server's ``base64_decode``: the characters up to the first one outside the alphabet."""
    body = _B64.match(text)
    chars = body.group(0) if body else ""
    if len(chars) % 4 == 1:
        chars = chars[:-1]  # one character carries no whole byte
    return base64.b64decode(chars + "=" * (-len(chars) % 4))


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp:  # llama-server fetches http(s) media too
            data: bytes = resp.read(MAX_DOWNLOAD + 1)
    except (urllib.error.URLError, OSError, ValueError):
        raise ApiError(400, "Failed to download image") from None
    if len(data) > MAX_DOWNLOAD:
        raise ApiError(400, "Failed to download image")
    return data


def load_media(url: str) -> bytes:
    """The file a media part's URL names (see the module docstring)."""
    if url.startswith("http"):
        return _download(url)
    if url.startswith("file://"):
        raise ApiError(400, "file:// URLs are not allowed unless --media-path is specified")
    if url.startswith("data:"):
        parts = url.split(",")
        if len(parts) != 2:
            raise ApiError(400, "Invalid uri-encoded base64 value")
        if not parts[0].startswith(("data:image/", "data:video/", "data:audio/")):
            raise ApiError(400, f"Invalid uri format: {parts[0]}")
        if not parts[0].endswith("base64"):
            raise ApiError(400, "uri must be base64 encoded")
        return lenient_b64decode(parts[1])
    data = lenient_b64decode(url)
    if not data:
        raise ApiError(400, "Invalid base64 value")
    return data


def part_url(part: JsonObject) -> str:
    """The URL (or data) of a media part, where llama-server looks for it."""
    kind = part.get("type")
    inner = part.get(str(kind))
    inner = inner if isinstance(inner, dict) else {}
    found = inner.get("url") if kind == "image_url" else inner.get("data", inner.get("url"))
    return found if isinstance(found, str) else ""


def _takes(projector: Any) -> dict[str, bool]:
    """The kinds of media part ``projector`` takes (llama-server's ``allow_image``/``_audio``/``_video``);
    "media": ``/completion``'s files, which libmtmd tells apart itself."""
    if projector is None:
        return {}
    return {"image": projector.vision, "audio": projector.audio, "video": projector.video, "media": True}


def media_prompt(front: Any, prompt: str, files: Sequence[tuple[str, bytes]], *, add_bos: bool) -> MediaPrompt:
    """A rendered chat with media markers, tokenized and its images encoded by the model's projector (on
    the request's HTTP thread: see :mod:`workers.inference.llama._mtmd`); llama-server's errors as 400s."""
    projector = front.llm.projector
    takes = _takes(projector)
    for kind, _ in files:
        if not takes.get(kind, False):
            raise MediaInput(kind)
    try:
        media: MediaPrompt = projector.prompt(prompt, [data for _, data in files], add_special=add_bos)
    except MediaError as exc:
        raise ApiError(400, str(exc)) from None
    if len(media.tokens) > front.max_prompt_tokens:
        n = len(media.tokens)
        raise too_long(f"{n} tokens", front.max_prompt_tokens, front.llm.n_ctx, n)
    if media.tokens and media.tokens[-1] < 0:  # the engine samples after text, never after an image
        raise ApiError(400, "the prompt must end with text after its last image")
    return media
