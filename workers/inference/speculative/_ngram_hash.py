"""The polynomial n-gram hash llama.cpp's ``ngram-map`` and ``ngram-mod`` share, rolled.

Both hash an n-gram as ``h = h * factor + token`` over its tokens, in unsigned arithmetic that wraps
(``uint32_t`` for ``common_ngram_map_hash``, ``size_t`` for ``common_ngram_mod::idx``): a polynomial
modulo 2^32 or 2^64. A ring's arithmetic lets the next window's hash come from the previous one
(take the first token out, shift, add the new one), so hashing a run of windows costs a few
operations a token instead of ``n``, with the very values llama.cpp computes. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

MASK32 = 0xFFFF_FFFF
MASK64 = 0xFFFF_FFFF_FFFF_FFFF


def ngram_hash(tokens: Sequence[int], start: int, n: int, factor: int, mask: int) -> int:
    """The hash of ``tokens[start:start + n]`` (llama.cpp's loop; a negative token wraps as in C)."""
    h = 0
    for i in range(start, start + n):
        h = (h * factor + tokens[i]) & mask
    return h


def ngram_hashes(tokens: Sequence[int], start: int, stop: int, n: int, factor: int, mask: int) -> list[int]:
    """The hashes of the n-grams starting at ``start`` .. ``stop - 1``, each as :func:`ngram_hash`."""
    if stop <= start:
        return []
    h = ngram_hash(tokens, start, n, factor, mask)
    out = [h]
    lead = lead_weight(n, factor, mask)
    for i in range(start, stop - 1):
        h = roll(h, tokens[i], tokens[i + n], lead, factor, mask)
        out.append(h)
    return out


def lead_weight(n: int, factor: int, mask: int) -> int:
    """The weight of an n-gram's first token in its hash: ``factor ** (n - 1)``, wrapped."""
    return pow(factor, n - 1, mask + 1)


def roll(h: int, out: int, into: int, lead: int, factor: int, mask: int) -> int:
    """The next window's hash: ``out`` (weighted ``lead``) leaves, ``into`` comes in."""
    return ((h - out * lead) * factor + into) & mask
