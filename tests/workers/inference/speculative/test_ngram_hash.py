"""The rolled n-gram hashes (``_ngram_hash``) are llama.cpp's loop's, window by window."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.inference.speculative._ngram_hash import MASK32, MASK64, ngram_hash, ngram_hashes
from workers.inference.speculative._ngram_map import LCG_FACTOR, ngram_map_hash
from workers.inference.speculative._ngram_mod import FACTOR

tokens = st.lists(st.integers(-(2**31), 2**31 - 1), max_size=60)


def test_the_map_hash_is_llama_cpps_uint32_lcg() -> None:
    # h = h * 2654435761 + t, wrapped to 32 bits, by hand
    h1 = 7
    h2 = (h1 * 2654435761 + 9) % 2**32
    assert ngram_map_hash([7, 9], 0, 2) == h2 == 1401181152
    assert ngram_map_hash([1, 7, 9], 1, 2) == h2
    assert ngram_map_hash([-1], 0, 1) == 2**32 - 1  # a negative token wraps as C's conversion does


@given(tokens, st.integers(1, 8), st.sampled_from([(LCG_FACTOR, MASK32), (FACTOR, MASK64)]))
def test_rolled_hashes_are_each_windows_own(seq: list[int], n: int, scheme: tuple[int, int]) -> None:
    factor, mask = scheme
    stop = max(len(seq) - n + 1, 0)
    assert ngram_hashes(seq, 0, stop, n, factor, mask) == [ngram_hash(seq, i, n, factor, mask) for i in range(stop)]
