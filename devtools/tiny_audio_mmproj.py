"""A tiny, real audio projector (``mmproj``) GGUF for :func:`devtools.tiny_gguf.write_tiny_gguf`'s model.

Why: audio input cannot be tested without a projector that llama.cpp's ``libmtmd``
loads with an audio encoder, and real ones are hundreds of megabytes. This writes
Ultravox's layout (``clip.projector_type = "ultravox"``; ``tools/mtmd/models/whisper-enc.cpp``):
a Whisper encoder (two 1-D convolutions over ``n_mel`` mel bins, the second of stride 2,
learned position embeddings, ``n_layer`` pre-norm blocks) whose frames are stacked
``stack_factor`` at a time, then Ultravox's projector (RMS norm, ``mm.a.mlp.1``, SwiGLU,
RMS norm, ``mm.a.mlp.2``) to the language model's ``n_embd``. Random weights: the audio
tokens carry no meaning, but different sounds give different embeddings.

libmtmd decodes WAV, MP3 and FLAC itself, resamples to 16 kHz, and cuts the log-mel
spectrogram into 30-second chunks of 3000 frames (a shorter sound is padded), each
``3000 / stack_factor / 2`` audio tokens (:func:`audio_tokens`: 15 with the default
factor of 100, where a real Ultravox's 8 gives 187). :func:`wav_bytes` writes small
WAV files for tests (stdlib ``wave``).

CLI: ``python -m devtools.tiny_audio_mmproj OUT.gguf [--seed N] [--n-embd 64]``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import wave
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from devtools.tiny_mmproj import Weights, encoder_blocks, finish

N_MEL = 80  # Whisper's
CHUNK_FRAMES = 3000  # mtmd's whisper preprocessor: 30 s of 10 ms frames per encoder pass
STACK_FACTOR = 100
SAMPLE_RATE = 16000


def audio_tokens(seconds: float = 1.0, stack_factor: int = STACK_FACTOR) -> int:
    """How many tokens one sound of ``seconds`` takes: per started 30-second chunk, the encoder's
    ``CHUNK_FRAMES / 2`` positions stacked ``stack_factor`` at a time."""
    chunks = int(seconds // 30) + 1
    return chunks * (CHUNK_FRAMES // stack_factor // 2)


def write_tiny_audio_mmproj(
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    n_embd_lm: int = 64,
    n_embd: int = 32,
    n_head: int = 4,
    n_ff: int = 48,
    n_layer: int = 1,
    n_mel: int = N_MEL,
    stack_factor: int = STACK_FACTOR,
    hidden: int = 64,
) -> Path:
    """Write the audio projector and return its path; ``n_embd_lm`` must be the language model's ``n_embd``.

    ``stack_factor`` must divide ``CHUNK_FRAMES / 2``: clip.cpp counts the tokens as
    ``CHUNK_FRAMES / stack_factor / 2`` but stacks the ``CHUNK_FRAMES / 2`` encoder outputs,
    and the two agree only then. ``n_ff`` must differ from ``n_embd`` (see tiny_mmproj).
    """
    n_pos = CHUNK_FRAMES // 2
    if n_embd % n_head or n_pos % stack_factor or n_ff == n_embd:
        raise ValueError("n_embd % n_head and 1500 % stack_factor must be 0, and n_ff != n_embd")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    w = gguf.GGUFWriter(out, "clip")
    w.add_name("tiny-audio-mmproj")
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_string("clip.projector_type", "ultravox")
    w.add_bool("clip.has_vision_encoder", False)
    w.add_bool("clip.has_audio_encoder", True)
    w.add_uint32("clip.audio.num_mel_bins", n_mel)
    w.add_uint32("clip.audio.projector.stack_factor", stack_factor)
    w.add_uint32("clip.audio.embedding_length", n_embd)
    w.add_uint32("clip.audio.feed_forward_length", n_ff)
    w.add_uint32("clip.audio.block_count", n_layer)
    w.add_uint32("clip.audio.attention.head_count", n_head)
    w.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.audio.projection_dim", n_embd_lm)

    r = Weights(rng)
    mat, vec = r.mat, r.vec

    # Whisper's stem: conv1d kernels are ggml ne [3, in, out] in F16 (im2col's type, as the
    # converter writes them); the biases [1, out] so they broadcast over frames.
    w.add_tensor("a.conv1d.1.weight", (rng.standard_normal((n_embd, n_mel, 3)) * 0.1).astype(np.float16))
    w.add_tensor("a.conv1d.1.bias", vec(n_embd).reshape(n_embd, 1))
    w.add_tensor("a.conv1d.2.weight", (rng.standard_normal((n_embd, n_embd, 3)) * 0.1).astype(np.float16))
    w.add_tensor("a.conv1d.2.bias", vec(n_embd).reshape(n_embd, 1))
    w.add_tensor("a.position_embd.weight", mat(n_pos, n_embd, 0.02))
    encoder_blocks(w, r, "a", n_layer, n_embd, n_ff, key_bias=False)
    w.add_tensor("a.post_ln.weight", vec(n_embd, 1.0))
    w.add_tensor("a.post_ln.bias", vec(n_embd, 0.0))
    # Ultravox's projector; SwiGLU halves mlp.1's output. Large enough outputs to move the logits.
    w.add_tensor("mm.a.norm_pre.weight", vec(n_embd * stack_factor, 1.0))
    w.add_tensor("mm.a.mlp.1.weight", mat(2 * hidden, n_embd * stack_factor, 0.3))
    w.add_tensor("mm.a.norm_mid.weight", vec(hidden, 1.0))
    w.add_tensor("mm.a.mlp.2.weight", mat(n_embd_lm, hidden, 0.3))
    return finish(w, out)


def tiny_audio_mmproj_bytes(**kwargs: Any) -> bytes:
    """The audio projector's bytes (for fake Hub repos that hold one beside the tiny model)."""
    with tempfile.TemporaryDirectory() as tmp:
        return write_tiny_audio_mmproj(Path(tmp) / "mmproj.gguf", **kwargs).read_bytes()


def wav_bytes(seconds: float = 0.5, hz: float = 440.0, *, rate: int = SAMPLE_RATE) -> bytes:
    """A mono 16-bit PCM WAV file of a sine tone (``hz``), or of silence with ``hz=0``."""
    t = np.arange(int(seconds * rate)) / rate
    samples = (np.sin(2 * np.pi * hz * t) * 0.5 * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(samples.tobytes())
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a tiny audio mmproj GGUF for the tiny llama.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-embd", type=int, default=64, help="the language model's n_embd")
    args = parser.parse_args(argv)
    out = write_tiny_audio_mmproj(args.out, seed=args.seed, n_embd_lm=args.n_embd)
    print(f"{out} {out.stat().st_size} bytes", file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
