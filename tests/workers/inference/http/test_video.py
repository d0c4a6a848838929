"""Video in chats on a real worker with a real vision projector (``--mmproj``: devtools/tiny_mmproj.py),
read as llama-server reads it: libmtmd's helper runs ``ffprobe`` and ``ffmpeg`` (Debian's; the
``ffmpeg`` fixture fails the tests without them), and the prompt gets "Video:", one image per frame
and a timestamp text every ``--video-timestamp-interval`` ms.

What is asserted: a video costs exactly its frames' tokens (the frames counted by ffprobe at the
worker's ``--video-fps``, times an image's tokens) plus those texts' tokens, the answer depends on
the video, the cache reuses it only when it is the same video, and what cannot be read gets
llama-server's 400.
"""

from __future__ import annotations

import base64
import functools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from devtools.tiny_mmproj import image_tokens, png_bytes, write_tiny_mmproj
from devtools.tiny_video import frames_at, video_bytes, webp_bytes
from tests.workers.conftest import WorkerProc, started_worker
from tests.workers.inference.http.media_chat import media_chat, serving

N_IMAGE = image_tokens()
pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("ffmpeg")]


@pytest.fixture(scope="module")
def clip(ffmpeg: None) -> bytes:
    """One second of a moving test pattern at 4 frames per second (64x64)."""
    return video_bytes(1.0, rate=4)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory, ffmpeg: None) -> Iterator[WorkerProc]:
    """The tiny model and its vision projector, llama-server's video defaults (4 fps, a timestamp
    every 5 s, ffmpeg from PATH)."""
    tmp = tmp_path_factory.mktemp("video")
    model, projector = write_tiny_gguf(tmp / "tiny.gguf"), write_tiny_mmproj(tmp / "mmproj.gguf")
    with started_worker(tmp, model, "video", ["--mmproj", str(projector), "--seed", "7"]) as w:
        yield w


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory, ffmpeg: None) -> Iterator[tuple[WorkerProc, Path]]:
    """``--video-fps 2 --video-timestamp-interval 500 --video-ffmpeg-dir BIN``: BIN holds ffmpeg and
    ffprobe wrappers that note each call in ``BIN/calls`` (so the directory is seen to be used)."""
    tmp = tmp_path_factory.mktemp("video-paced")
    model, projector = write_tiny_gguf(tmp / "tiny.gguf"), write_tiny_mmproj(tmp / "mmproj.gguf")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("ffmpeg", "ffprobe"):
        _wrapper(bin_dir, name)
    extra = [
        "--mmproj",
        str(projector),
        "--video-fps",
        "2",
        "--video-timestamp-interval",
        "500",
        "--video-ffmpeg-dir",
        str(bin_dir),
    ]
    with started_worker(tmp, model, "video-paced", extra) as w:
        yield w, bin_dir


def _wrapper(bin_dir: Path, name: str) -> None:
    real = shutil.which(name)
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\necho {name} >> "{bin_dir}/calls"\nexec "{real}" "$@"\n')
    script.chmod(0o755)


def _video(data: bytes, kind: str = "input_video", mime: str = "video/mp4") -> dict[str, Any]:
    return {"type": kind, kind: {"url": f"data:{mime};base64," + base64.b64encode(data).decode()}}


_chat = functools.partial(media_chat, max_tokens=3)


def _n_text(url: str, *texts: str) -> int:
    """The tokens of the helper's texts ("Video:", "[0m0.00s]"...), as the worker tokenizes a text chunk."""
    answers = [httpx.post(url + "/tokenize", json={"content": t}, timeout=30).json()["tokens"] for t in texts]
    return sum(len(tokens) for tokens in answers)


def _first_logprobs(answer: dict[str, Any]) -> list[float]:
    return [t["logprob"] for t in answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]]


def test_a_video_part_costs_its_frames_tokens(worker: WorkerProc, clip: bytes) -> None:
    """An ``input_video`` part (and OpenAI's ``video_url`` alias): the prompt grows by "Video:", one
    image per frame ffprobe counts at 4 fps, and the one timestamp of a 1-second video; every token
    is evaluated; another video gives other logits, the same video the same; ``/props`` says video."""
    url = worker.endpoint
    text = _chat(url, cache_prompt=False)["usage"]["prompt_tokens"]
    frames = frames_at(clip, 4.0)
    assert frames == 4
    expected = text + frames * N_IMAGE + _n_text(url, "Video:", "[0m0.00s]")
    seen = _chat(url, _video(clip), cache_prompt=False, logprobs=True, top_logprobs=3)
    assert seen["usage"]["prompt_tokens"] == expected
    assert seen["timings"]["prompt_n"] == expected, "every frame evaluated"
    alias = _chat(url, _video(clip, "video_url"), cache_prompt=False, logprobs=True, top_logprobs=3)
    assert alias["usage"]["prompt_tokens"] == expected and _first_logprobs(alias) == _first_logprobs(seen)
    other = _chat(url, _video(video_bytes(1.0, rate=4, size=48)), cache_prompt=False, logprobs=True, top_logprobs=3)
    assert other["usage"]["prompt_tokens"] == expected, "the same frames, resized by the projector"
    assert _first_logprobs(other) != _first_logprobs(seen), "another video, other logits"
    props = httpx.get(url + "/props", timeout=30).json()
    assert props["modalities"] == {"vision": True, "video": True, "audio": False}


def test_the_cache_keeps_a_video_only_for_the_same_video(worker: WorkerProc, clip: bytes) -> None:
    """The same video again reuses the whole prompt but its last token (each frame's chunk id is the
    file's hash and the frame's number, as in llama-server); another video reuses nothing of it."""
    url = worker.endpoint
    first = _chat(url, _video(clip))
    again = _chat(url, _video(clip))
    assert again["timings"]["cache_n"] == again["usage"]["prompt_tokens"] - 1
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    other = _chat(url, _video(video_bytes(1.0, rate=4, size=40)))  # one no slot has seen
    frames_on = other["usage"]["prompt_tokens"] - other["timings"]["cache_n"]
    assert frames_on >= 4 * N_IMAGE, "reused up to the first frame, not into the video"


def test_media_is_told_apart_by_its_bytes_as_llama_server_does(worker: WorkerProc, clip: bytes) -> None:
    """The part's type only says the model may take it: a video in an ``image_url`` part is read as a
    video, a PNG in an ``input_video`` part as an image (libmtmd looks at the bytes); a WebP picture,
    which stb_image cannot read, is one image too (libmtmd has ffmpeg decode its one frame)."""
    url = worker.endpoint
    text = _chat(url, cache_prompt=False)["usage"]["prompt_tokens"]
    as_image = _chat(url, _video(clip, "image_url", "image/png"), cache_prompt=False)["usage"]["prompt_tokens"]
    assert as_image == text + 4 * N_IMAGE + _n_text(url, "Video:", "[0m0.00s]")
    png = _chat(url, _video(png_bytes(40, 30, (0, 90, 0))), cache_prompt=False)["usage"]["prompt_tokens"]
    assert png == text + N_IMAGE
    webp = _chat(url, _video(webp_bytes(40, 30), "image_url", "image/webp"), cache_prompt=False)
    assert webp["usage"]["prompt_tokens"] == text + N_IMAGE


def test_an_unreadable_video_gets_llama_servers_400(worker: WorkerProc, clip: bytes) -> None:
    """Bytes ffprobe cannot read (a cut-off MP4, noise), a ``data:`` URI that is not base64, and a
    ``file://`` URL: llama-server's words; the worker serves on."""
    url = worker.endpoint

    def refused(part: dict[str, Any]) -> str:
        error: dict[str, Any] = _chat(url, part, status=400)["error"]
        assert error["type"] == "invalid_request_error"
        return str(error["message"])

    assert refused(_video(clip[:200])) == "Failed to load image or audio file"
    assert refused(_video(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 4)) == "Failed to load image or audio file"
    assert refused({"type": "input_video", "input_video": {"url": "data:video/mp4,AAAA"}}) == (
        "uri must be base64 encoded"
    )
    assert refused({"type": "video_url", "video_url": {"url": "file:///tmp/x.mp4"}}).startswith("file:// URLs")
    assert _chat(url)["choices"][0]["finish_reason"] in ("stop", "length")


def test_an_http_video_url_is_downloaded(worker: WorkerProc, clip: bytes, tmp_path: Path) -> None:
    """As for images, llama-server fetches an ``http(s)`` video URL itself: the same prompt as the
    data URI's."""
    (tmp_path / "clip.mp4").write_bytes(clip)
    with serving(tmp_path) as base:
        fetched = _chat(
            worker.endpoint,
            {"type": "video_url", "video_url": {"url": f"{base}/clip.mp4"}},
            cache_prompt=False,
            logprobs=True,
            top_logprobs=3,
        )
    inline = _chat(worker.endpoint, _video(clip), cache_prompt=False, logprobs=True, top_logprobs=3)
    assert fetched["usage"]["prompt_tokens"] == inline["usage"]["prompt_tokens"]
    assert _first_logprobs(fetched) == _first_logprobs(inline)


def test_video_flags_set_the_frames_timestamps_and_binaries(paced: tuple[WorkerProc, Path], clip: bytes) -> None:
    """``--video-fps 2``: the frames ffprobe counts at 2 fps (2, not the default's 4);
    ``--video-timestamp-interval 500``: a timestamp every half second; ``--video-ffmpeg-dir``: its
    ffprobe and ffmpeg run, and without them the video is llama-server's 400."""
    worker, bin_dir = paced
    url = worker.endpoint
    text = _chat(url, cache_prompt=False)["usage"]["prompt_tokens"]
    frames = frames_at(clip, 2.0)
    assert frames == 2
    expected = text + frames * N_IMAGE + _n_text(url, "Video:", "[0m0.00s]", "[0m0.50s]")
    assert _chat(url, _video(clip), cache_prompt=False)["usage"]["prompt_tokens"] == expected
    calls = (bin_dir / "calls").read_text().split()
    assert calls == ["ffprobe", "ffmpeg"], "the directory's binaries read the video"
    (bin_dir / "ffprobe").rename(bin_dir / "ffprobe.away")
    try:
        missing = _chat(url, _video(clip), status=400)["error"]["message"]
    finally:
        (bin_dir / "ffprobe.away").rename(bin_dir / "ffprobe")
    assert missing == "Failed to load image or audio file", "no ffprobe: the 400 llama-server gives"
    assert _chat(url, _video(clip), cache_prompt=False)["usage"]["prompt_tokens"] == expected
