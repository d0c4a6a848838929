"""``ngram-simple``: llama.cpp's ``common_ngram_simple_draft`` (``common/ngram-map.cpp``).

The last ``size_n`` tokens (the sampled one included) are looked for earlier in the sequence,
latest match first; the ``size_m`` tokens that followed the match are the draft, when at least
``size_n`` of them exist. No state: every call searches the history afresh. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def ngram_simple_draft(tokens: Sequence[int], sampled: int, size_n: int, size_m: int) -> list[int]:
    """llama.cpp's function, index for index: the m-gram after the latest earlier match of the n-gram
    that ends with ``sampled``; empty when there is none or it is shorter than ``size_n``."""
    cur_len = len(tokens)
    if cur_len <= size_n + size_m + 1:
        return []
    pattern = [*tokens[cur_len - size_n + 1 :], sampled]
    first = pattern[0]
    match_pos = 0  # 0: no match (llama.cpp never matches at position 0)
    for j in range(cur_len - size_n - 1, 0, -1):
        if tokens[j] == first and list(tokens[j : j + size_n]) == pattern:
            match_pos = j
            break
    if match_pos == 0:
        return []
    copy_max = min(size_m, cur_len - (match_pos + size_n))
    if copy_max < size_n:
        return []
    start = match_pos + size_n
    return list(tokens[start : start + copy_max])


@dataclass
class NgramSimple:
    """The drafter (``--spec-ngram-simple-size-n``, ``-size-m``; ``min-hits`` is not read, as in llama.cpp)."""

    size_n: int = 12
    size_m: int = 48
    name: str = "ngram-simple"

    @property
    def n_max(self) -> int:
        return self.size_m

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        pass

    def draft(self, seq: int, history: Sequence[int], last: int, n_max: int) -> list[int]:
        return ngram_simple_draft(history, last, self.size_n, self.size_m)[: max(n_max, 0)]

    def accept(self, seq: int, n_accepted: int) -> None:
        pass
