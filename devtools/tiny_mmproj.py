"""A tiny, real multimodal projector (``mmproj``) GGUF for :func:`devtools.tiny_gguf.write_tiny_gguf`'s model.

Why: image input cannot be tested without a projector that llama.cpp's ``libmtmd``
loads, and real ones are hundreds of megabytes. This writes LLaVA 1.5's layout
(``clip.projector_type = "mlp"``, the simplest projector ``tools/mtmd/clip.cpp``
loads): a ViT of ``n_layer`` blocks over ``image_size``-pixel square images cut into
``patch_size`` patches, then a two-layer MLP (``mm.0``, GELU, ``mm.2``) whose output
width is the language model's ``n_embd``. llava's graph (``models/llava.cpp``) runs all
but the last block (the second-to-last layer's features, as LLaVA does), so two blocks
mean one is evaluated. Random weights: the image tokens carry no meaning, but they are
different for different pictures, which is what tests of image evaluation assert.

With the defaults (32-pixel images, 8-pixel patches) every image becomes
``(32 / 8) ** 2 = 16`` image tokens (:func:`image_tokens`), whatever its size: mtmd's
fixed-size preprocessor resizes it first. :func:`png_bytes` writes small PNGs for
tests (stdlib only: ``zlib`` and ``struct``).

CLI: ``python -m devtools.tiny_mmproj OUT.gguf [--seed N] [--n-embd 64]``.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import gguf
import numpy as np

IMAGE_SIZE = 32
PATCH_SIZE = 8


def image_tokens(image_size: int = IMAGE_SIZE, patch_size: int = PATCH_SIZE) -> int:
    """How many tokens (and positions) one image takes with this projector: one per patch."""
    return (image_size // patch_size) ** 2


class Weights:
    """Random tensors from one generator, as the tiny projectors draw them."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def mat(self, rows: int, cols: int, std: float = 0.1) -> np.ndarray:
        # numpy (rows, cols) is ggml ne (cols, rows): (out_features, in_features)
        return (self.rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def vec(self, n: int, value: float | None = None) -> np.ndarray:
        if value is not None:
            return np.full(n, value, dtype=np.float32)
        return (self.rng.standard_normal(n) * 0.02).astype(np.float32)


def encoder_blocks(
    w: Any, r: Weights, prefix: str, n_layer: int, n_embd: int, n_ff: int, *, key_bias: bool = True
) -> None:
    """clip.cpp's transformer blocks (``{prefix}.blk.N.*``), shared by the vision and audio encoders;
    ``key_bias=False``: Whisper's key projection has none (whisper-enc.cpp asserts it)."""
    for i in range(n_layer):
        p = f"{prefix}.blk.{i}."
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(p + part + ".weight", r.mat(n_embd, n_embd))
            if key_bias or part != "attn_k":
                w.add_tensor(p + part + ".bias", r.vec(n_embd))
        for norm in ("ln1", "ln2"):
            w.add_tensor(p + norm + ".weight", r.vec(n_embd, 1.0))
            w.add_tensor(p + norm + ".bias", r.vec(n_embd, 0.0))
        w.add_tensor(p + "ffn_up.weight", r.mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.bias", r.vec(n_ff))
        w.add_tensor(p + "ffn_down.weight", r.mat(n_embd, n_ff))
        w.add_tensor(p + "ffn_down.bias", r.vec(n_embd))


def finish(w: Any, out: Path) -> Path:
    """Write the GGUF's header, keys and tensors, and close it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def write_tiny_mmproj(
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    n_embd_lm: int = 64,
    n_embd: int = 32,
    n_head: int = 4,
    n_ff: int = 48,
    n_layer: int = 2,
    image_size: int = IMAGE_SIZE,
    patch_size: int = PATCH_SIZE,
    hidden: int = 64,
) -> Path:
    """Write the projector and return its path; ``n_embd_lm`` must be the language model's ``n_embd``.

    ``n_ff`` must differ from ``n_embd``: clip.cpp takes an ``ffn_down`` whose input width is
    ``n_embd`` for an old conversion with ``up`` and ``down`` swapped, and swaps them back.
    """
    if n_embd % n_head or image_size % patch_size or n_ff == n_embd:
        raise ValueError("n_embd % n_head, image_size % patch_size must be 0, and n_ff != n_embd")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n_pos = image_tokens(image_size, patch_size)

    w = gguf.GGUFWriter(out, "clip")
    w.add_name("tiny-mmproj")
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_audio_encoder", False)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.projection_dim", n_embd_lm)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    r = Weights(rng)
    mat, vec = r.mat, r.vec

    # The patch embedding is a convolution: ggml ne [patch, patch, 3, n_embd].
    w.add_tensor(
        "v.patch_embd.weight", (rng.standard_normal((n_embd, 3, patch_size, patch_size)) * 0.1).astype(np.float32)
    )
    w.add_tensor("v.patch_embd.bias", vec(n_embd))
    w.add_tensor("v.position_embd.weight", mat(n_pos, n_embd, 0.02))
    w.add_tensor("v.pre_ln.weight", vec(n_embd, 1.0))
    w.add_tensor("v.pre_ln.bias", vec(n_embd, 0.0))
    encoder_blocks(w, r, "v", n_layer, n_embd, n_ff)
    # The projector: large enough outputs that an image moves the language model's logits.
    w.add_tensor("mm.0.weight", mat(hidden, n_embd, 0.3))
    w.add_tensor("mm.0.bias", vec(hidden))
    w.add_tensor("mm.2.weight", mat(n_embd_lm, hidden, 0.3))
    w.add_tensor("mm.2.bias", vec(n_embd_lm))
    return finish(w, out)


def tiny_mmproj_bytes(**kwargs: Any) -> bytes:
    """The projector's bytes (for fake Hub repos that hold one beside the tiny model)."""
    with tempfile.TemporaryDirectory() as tmp:
        return write_tiny_mmproj(Path(tmp) / "mmproj.gguf", **kwargs).read_bytes()


def png_bytes(width: int, height: int, rgb: tuple[int, int, int] | None = None, *, seed: int = 0) -> bytes:
    """A valid 8-bit RGB PNG: one colour (``rgb``), or random pixels from ``seed``."""
    if rgb is not None:
        pixels = np.tile(np.array(rgb, dtype=np.uint8), (height, width, 1))
    else:
        pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(height))  # filter byte 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a tiny mmproj GGUF for the tiny llama.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-embd", type=int, default=64, help="the language model's n_embd")
    args = parser.parse_args(argv)
    out = write_tiny_mmproj(args.out, seed=args.seed, n_embd_lm=args.n_embd)
    print(f"{out} {out.stat().st_size} bytes", file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
