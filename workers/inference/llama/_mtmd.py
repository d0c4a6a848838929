"""A model's multimodal projector (``--mmproj``) through llama.cpp's ``libmtmd`` (``llama_cpp.mtmd_cpp``).

How a prompt with images runs, as llama-server runs it (``process_mtmd_prompt``):
the chat is rendered with a media marker where each image was, ``mtmd_tokenize``
splits it into text chunks (token ids) and media chunks (``n_tokens`` embeddings
that take ``n_pos`` positions but have no token id), and prompt evaluation decodes
text chunks as tokens and media chunks as embeddings, in order, in the slot's
sequence.

Where the work happens, and why:

* :meth:`Projector.prompt` (the request's HTTP thread): decoding the file into a
  bitmap, tokenizing, and **encoding** each image with the vision tower
  (``mtmd_encode_chunk``: the costly part, seconds for a real model on a CPU). It
  runs under a lock (mtmd's encoder keeps one output buffer), but off the engine
  thread, so other slots keep generating while an image is encoded. The last
  :data:`EMBEDDING_CACHE` images' embeddings are kept by image hash: a follow-up
  turn about the same picture does not encode it again.
* :meth:`Projector.decode` (the engine thread): the embeddings into the shared
  context with the slot's ``seq_id`` (``mtmd_helper_decode_image_chunk``, which
  also switches to non-causal attention for models that need it).

In the engine's token lists an image is a run of ``n_tokens`` copies of one
negative number, the same for the same image bytes (:func:`media_token`), so
prefix reuse (a plain list comparison) reuses an image only when it is the same
picture, and stops at its start otherwise.

Video, as llama-server takes it: bytes that are neither an image nor a sound
are handed to libmtmd's video helper (``mtmd_helper_bitmap_init_from_buf`` falls
through to ``mtmd_helper_video_init_from_buf``), which runs ``ffprobe`` and
``ffmpeg`` (:class:`VideoOptions`: ``--video-fps``, ``--video-timestamp-interval``,
``--video-ffmpeg-dir``) and returns a lazy bitmap; ``mtmd_tokenize`` expands it
into "Video:", then one image chunk per frame (chunk id: the file's hash and the
frame's number) with a timestamp text chunk ("[0m5.00s]") every interval. Each
frame is then an image like any other here.
"""

from __future__ import annotations

import collections
import ctypes
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from workers.inference.llama._bindings import lowlevel

EMBEDDING_CACHE = 4  # images whose embeddings are kept (a 256-token image of a 2560-wide model: 2.6 MB)
_CHUNK_TEXT, _CHUNK_IMAGE, _CHUNK_AUDIO = 0, 1, 2


@dataclass(frozen=True)
class VideoOptions:
    """llama-server's ``--video-fps`` (<= 0: the video's own rate), ``--video-timestamp-interval``
    (milliseconds between timestamp texts; <= 0: none) and ``--video-ffmpeg-dir`` (None: ``PATH``),
    with llama.cpp's defaults (``common_params``)."""

    fps: float = 4.0
    timestamp_interval_ms: int = 5000
    ffmpeg_dir: str | None = None


class MediaError(ValueError):
    """A file that is not an image, audio or video llama.cpp can read, or a prompt it cannot split (a 400)."""


_media_ids: dict[bytes, int] = {}
_media_ids_lock = threading.Lock()


def media_token(chunk_id: bytes) -> int:
    """The negative stand-in token of an image in the engine's token lists: one per distinct image
    (mtmd's chunk id is the SHA-256 of the file), never equal to another image's nor to a real token."""
    with _media_ids_lock:
        found = _media_ids.get(chunk_id)
        if found is None:
            found = _media_ids[chunk_id] = -2 - len(_media_ids)  # -1 is LLAMA_TOKEN_NULL
        return found


def new_marker() -> str:
    """A media marker no client text is likely to contain (llama-server's ``get_media_marker``)."""
    return f"<__media_{secrets.token_hex(16)}__>"


MEDIA_MARKER = new_marker()
"""This process's media marker: chats carry it where each media part was, and the projector splits there."""


@dataclass
class MediaChunk:
    """One image of a prompt: where it starts in the token list, its size, and its embeddings."""

    start: int
    n_tokens: int
    n_pos: int
    embd: Any  # a ctypes float array of n_tokens * n_embd, owned here
    chunk: Any  # the mtmd_input_chunk, valid while its MediaPrompt lives


@dataclass
class MediaPrompt:
    """A tokenized prompt with media: the engine's token list and the media chunks by start index.

    Owns the mtmd chunk list; it is freed when the last reference goes (the request
    and its front both hold one), never while the engine may still decode it.
    """

    tokens: list[int]
    media: dict[int, MediaChunk] = field(default_factory=dict)
    _chunks: Any = None
    _free: Any = None

    def __del__(self) -> None:
        if self._chunks is not None and self._free is not None:
            self._free(self._chunks)
            self._chunks = None


class Projector:
    """An mtmd context on the model's weights (see the module docstring)."""

    def __init__(
        self,
        path: str,
        model: Any,
        *,
        n_threads: int,
        n_batch: int,
        marker: str = MEDIA_MARKER,
        video: VideoOptions | None = None,
        use_gpu: bool = True,
    ) -> None:
        from llama_cpp import mtmd_cpp

        self.mt = mtmd_cpp
        self.lc = lowlevel()
        self.marker = marker
        self.n_batch = n_batch
        p = mtmd_cpp.mtmd_context_params_default()
        # use_gpu: --mmproj-offload (on by default, as llama-server's); a build without a GPU runs it on the CPU
        p.use_gpu, p.n_threads, p.media_marker, p.print_timings = use_gpu, max(1, n_threads), marker.encode(), False
        self.use_gpu = bool(p.use_gpu)
        self.ctx = mtmd_cpp.mtmd_init_from_file(path.encode(), model, p)
        if not self.ctx:
            raise RuntimeError(f"failed to load the multimodal projector {path}")
        self.vision = bool(mtmd_cpp.mtmd_support_vision(self.ctx))
        self.audio = bool(mtmd_cpp.mtmd_support_audio(self.ctx))
        # llama-server's allow_video: a vision projector in a build with MTMD_VIDEO (ffmpeg is looked for per video)
        self.video = bool(mtmd_cpp.mtmd_helper_support_video(self.ctx))
        self._init_opt = _init_opt(mtmd_cpp, video or VideoOptions())
        self.mrope = bool(mtmd_cpp.mtmd_decode_use_mrope(self.ctx))
        self.n_embd = int(self.lc.llama_model_n_embd_inp(model))
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[tuple[bytes, int], Any] = collections.OrderedDict()

    def prompt(self, text: str, files: list[bytes], *, add_special: bool) -> MediaPrompt:
        """``text`` with one marker per file: tokenized, each image encoded (raises :class:`MediaError`)."""
        mt = self.mt
        bitmaps, videos = [], []
        try:
            for data in files:
                buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                loaded = mt.mtmd_helper_bitmap_init_from_buf_wrapper(self.ctx, buf, len(data), False, self._init_opt)
                if loaded.video_ctx:  # a video: its lazy bitmap reads frames from it while mtmd_tokenize runs
                    videos.append(loaded.video_ctx)
                if not loaded.bitmap:
                    raise MediaError("Failed to load image or audio file")
                bitmaps.append(loaded.bitmap)
            chunks = mt.mtmd_input_chunks_init()
            out = MediaPrompt([], _chunks=chunks, _free=mt.mtmd_input_chunks_free)
            raw = text.encode()
            inp = mt.mtmd_input_text(raw, len(raw), add_special, True)
            arr = (mt.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            if mt.mtmd_tokenize(self.ctx, chunks, ctypes.byref(inp), arr, len(bitmaps)) != 0:
                raise MediaError("Failed to tokenize prompt")
        finally:
            for bitmap in bitmaps:
                mt.mtmd_bitmap_free(bitmap)
            for video in videos:  # stops its ffmpeg
                mt.mtmd_helper_video_free(video)
        for i in range(int(mt.mtmd_input_chunks_size(chunks))):
            self._add_chunk(out, mt.mtmd_input_chunks_get(chunks, i))
        return out

    def _add_chunk(self, out: MediaPrompt, chunk: Any) -> None:
        mt = self.mt
        if int(mt.mtmd_input_chunk_get_type(chunk)) == _CHUNK_TEXT:
            n = ctypes.c_size_t(0)
            ids = mt.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            out.tokens.extend(ids[: n.value])
            return
        n_tokens = int(mt.mtmd_input_chunk_get_n_tokens(chunk))
        chunk_id = mt.mtmd_input_chunk_get_id(chunk) or secrets.token_bytes(16)
        embd = self._encode(chunk, chunk_id, n_tokens)
        start = len(out.tokens)
        out.media[start] = MediaChunk(start, n_tokens, int(mt.mtmd_input_chunk_get_n_pos(chunk)), embd, chunk)
        out.tokens.extend([media_token(chunk_id)] * n_tokens)

    def _encode(self, chunk: Any, chunk_id: bytes, n_tokens: int) -> Any:
        """The chunk's embeddings: from the cache, or encoded now (under the lock) and copied out."""
        key = (chunk_id, n_tokens)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
            if self.mt.mtmd_encode_chunk(self.ctx, chunk) != 0:
                raise MediaError("Failed to encode image or audio file")
            n = n_tokens * self.n_embd
            embd = (ctypes.c_float * n)()
            ctypes.memmove(embd, self.mt.mtmd_get_output_embd(self.ctx), n * ctypes.sizeof(ctypes.c_float))
            self._cache[key] = embd
            while len(self._cache) > EMBEDDING_CACHE:
                self._cache.popitem(last=False)
            return embd

    def decode(self, llama_ctx: Any, media: MediaChunk, pos: int, seq: int) -> int:
        """Decode one image's embeddings at position ``pos`` of sequence ``seq`` (engine thread);
        returns llama_decode's result (0: done)."""
        new_pos = self.lc.llama_pos(pos)
        no_callback = self.mt.mtmd_helper_post_decode_callback()  # a NULL function pointer
        mt, out = self.mt, ctypes.byref(new_pos)
        ret = mt.mtmd_helper_decode_image_chunk(
            self.ctx, llama_ctx, media.chunk, media.embd, pos, seq, self.n_batch, out, no_callback, None
        )
        return int(ret)

    def close(self) -> None:
        if self.ctx:
            self.mt.mtmd_free(self.ctx)
            self.ctx = None


def _init_opt(mt: Any, video: VideoOptions) -> Any:
    """The ``mtmd_helper_init_opt`` every file is read with (llama-server's ``init_opt``)."""
    opt = mt.mtmd_helper_init_opt_default()
    opt.video_params.fps_target = video.fps
    opt.video_params.timestamp_interval_ms = video.timestamp_interval_ms
    # NULL: ffmpeg and ffprobe from PATH; the structure keeps the bytes alive
    opt.video_params.ffmpeg_bin_dir = video.ffmpeg_dir.encode() if video.ffmpeg_dir else None
    return opt
