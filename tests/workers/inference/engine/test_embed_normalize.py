"""The engine's embedding normalisation is llama.cpp's ``common_embd_normalize`` to the bit.

The reference below is that C function written out in Python, one float32
rounding (``struct``) where C rounds to ``float``: products of two floats, the
scale ``1.0 / sum``, each scaled value. A double-precision pass instead differs
from llama-server in the last bit of about one value in five.
"""

from __future__ import annotations

import math
import random
import struct

import numpy as np
import pytest

from workers.inference.engine._embed import normalize


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def _common_embd_normalize(inp: list[float], embd_norm: int) -> list[float]:
    total = 0.0
    if embd_norm == -1:
        total = 1.0
    elif embd_norm == 0:
        for x in inp:
            if total < abs(x):
                total = abs(x)
        total /= 32760.0
    elif embd_norm == 2:
        for x in inp:
            total += _f32(x * x)  # float * float, added to a double
        total = math.sqrt(total)
    else:
        for x in inp:
            total += math.pow(abs(x), embd_norm)  # std::pow(float, int): in double
        total = math.pow(total, 1.0 / embd_norm)
    norm = _f32(1.0 / total) if total > 0.0 else 0.0
    return [_f32(x * norm) for x in inp]


@pytest.mark.parametrize("embd_norm", [-1, 0, 2, 3])
def test_normalize_matches_llama_cpp_bit_for_bit(embd_norm: int) -> None:
    rng = random.Random(embd_norm)
    for scale in (0.05, 1.0, 40.0):
        vec = np.array([rng.gauss(0.0, scale) for _ in range(384)], dtype=np.float32)
        got = normalize(vec, embd_norm)
        assert got.dtype == np.float32
        assert got.tolist() == _common_embd_normalize(vec.tolist(), embd_norm)


def test_a_zero_vector_stays_zero() -> None:
    assert normalize(np.zeros(8, dtype=np.float32), 2).tolist() == [0.0] * 8
