"""``ngram-simple``: llama.cpp's ``common_ngram_simple_draft`` (``common/ngram-map.cpp``).

The last ``size_n`` tokens (the sampled one included) are looked for earlier in the sequence,
latest match first; the ``size_m`` tokens that followed the match are the draft, when at least
``size_n`` of them exist. No state: every call searches the history afresh. Pure.

Beyond llama-server, with adaptive drafting (:data:`SHORT_NGRAMS`): where the ``size_n``-gram is found
nowhere, shorter ones are looked for. After a value the text does not share with its source (a new
invoice number in a JSON answer, the renamed word of an edit), the 12 tokens before the next token
include it, so llama.cpp's lookup finds nothing until 12 tokens have passed; a 3-token one finds the
value itself where the prompt has it, or the next key. The governor pays for the drafts that miss.

Only for a sequence that generates alone. Beside other generating slots a plain step costs each of them
less while a drafted row costs what it costs, so a guess must stand more often to pay: with four, about
4.2 ms a row against 9.5 ms a token (Gemma 3 270M, two cores), 44 % of the time, where a JSON answer's
short-lookup drafts stand about a third of the time (measured in ``docs/benchmarks.md``).
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


SHORT_NGRAMS = (6, 4, 3)
"""The shorter lookups tried in turn when the ``size_n``-gram has no match (those below ``size_n``)."""


@dataclass
class NgramSimple:
    """The drafter (``--spec-ngram-simple-size-n``, ``-size-m``; ``min-hits`` is not read, as in llama.cpp);
    ``fallback``: shorter n-gram sizes looked up in turn when ``size_n`` finds nothing and the sequence
    generates alone (none: llama.cpp's)."""

    size_n: int = 12
    size_m: int = 48
    name: str = "ngram-simple"
    fallback: tuple[int, ...] = ()

    @property
    def n_max(self) -> int:
        return self.size_m

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        pass

    def draft(self, seq: int, history: Sequence[int], last: int, n_max: int, *, alone: bool = True) -> list[int]:
        shorter = [n for n in self.fallback if n < self.size_n] if alone else []
        for size_n in (self.size_n, *shorter):
            found = ngram_simple_draft(history, last, size_n, self.size_m)
            if found:
                return found[: max(n_max, 0)]
        return []

    def accept(self, seq: int, n_accepted: int) -> None:
        pass
