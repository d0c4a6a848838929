"""Tiny videos for the video tests, made and measured by Debian's ``ffmpeg`` and ``ffprobe``.

llama-server reads a chat's video through libmtmd's helper, which runs the same two
binaries: ``ffprobe`` for the size and rate, ``ffmpeg -vf fps=N`` for the frames. The
tests make a video with ffmpeg's ``testsrc`` pattern (moving, so every frame differs)
and count the frames a rate keeps with ffprobe, independently of libmtmd.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

MISSING = "ffmpeg/ffprobe not found: install Debian's `ffmpeg` package (make test does)"


def ffmpeg_missing() -> str | None:
    """Why videos cannot be made or read here (:data:`MISSING`), or None when both binaries are on ``PATH``."""
    return None if shutil.which("ffmpeg") and shutil.which("ffprobe") else MISSING


def video_bytes(seconds: float = 1.0, rate: int = 4, size: int = 64) -> bytes:
    """An MP4 (H.264, yuv420p) of ``seconds`` of ``testsrc`` at ``rate`` frames per second."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "video.mp4"
        source = f"testsrc=size={size}x{size}:rate={rate}"
        cmd = ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", source, "-t", str(seconds), "-pix_fmt", "yuv420p"]
        subprocess.run([*cmd, str(out)], check=True, timeout=60)
        return out.read_bytes()


def webp_bytes(width: int, height: int, color: str = "red") -> bytes:
    """A one-colour WebP picture (stb_image cannot read WebP: libmtmd has ffmpeg decode it)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "picture.webp"
        source = f"color=c={color}:size={width}x{height}"
        cmd = ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", source, "-frames:v", "1", "-c:v", "libwebp", str(out)]
        subprocess.run(cmd, check=True, timeout=60)
        return out.read_bytes()


def frames_at(data: bytes, fps: float) -> int:
    """How many frames ``ffmpeg -vf fps=<fps>`` makes of the video ``data``: its RGB output (the
    helper's command) divided by a frame's size, the size from ``ffprobe``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "video.mp4"
        path.write_bytes(data)
        probe = [
            "ffprobe",
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=width,height",
            "-of",
            "csv=p=0",
            str(path),
        ]
        width, height = map(int, _run(probe).decode().strip().split(","))
        cut = [
            "ffmpeg",
            "-v",
            "error",
            "-nostdin",
            "-i",
            str(path),
            "-vf",
            f"fps={fps:.6f}",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "pipe:1",
        ]
        return len(_run(cut)) // (width * height * 3)


def _run(cmd: list[str]) -> bytes:
    return subprocess.run(cmd, check=True, capture_output=True, timeout=60).stdout
