"""``ngram-mod``: llama.cpp's ``common_ngram_mod`` (``common/ngram-mod.cpp``), driven as
``common_speculative_impl_ngram_mod`` drives it (``common/speculative.cpp``).

One hash table for all sequences (4M ``int32`` slots): the slot of an ``n_match``-gram's hash holds
the token that last followed an n-gram hashing there, collisions overwriting. A draft starts from
the last ``n_match`` tokens (the sampled one included) and follows the table token by token, up to
``n_max``; ending before ``n_min`` tokens it is dropped. Each sequence adds its history's n-grams in
chunks (when 32 tokens are new), ``begin`` adds the prompt's and empties the table once a quarter of
it is used, and five drafts in a row with under a quarter accepted empty it too.

Index for index llama.cpp's, with Python's shape where it changes no result: the table is an
``array('i')``, and the hashes of consecutive n-grams are rolled (:mod:`._ngram_hash`), so adding a
prompt and following the table cost a few operations a token instead of ``n_match``. llama.cpp's
warnings (``n_match`` under 16, the occupancy reset) are not logged.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from workers.inference.speculative._ngram_hash import MASK64, lead_weight, ngram_hash, ngram_hashes, roll

FACTOR = 6364136223846793005
"""The multiplier of ``common_ngram_mod::idx``."""
EMPTY = -1
"""``common_ngram_mod::EMPTY``: a slot no n-gram filled."""
TABLE_SIZE = 4 * 1024 * 1024
"""The slots ``common_speculative_impl_ngram_mod`` gives its table."""
OCCUPANCY_RESET = 0.25
"""``begin`` empties the table when more than this share of it is used."""
CHUNK = 32
"""A draft adds the history's n-grams once more than this many are new."""


class NgramModTable:
    """``common_ngram_mod``: n-gram hash -> the token that followed."""

    def __init__(self, n: int, size: int = TABLE_SIZE) -> None:
        self.n = n
        self.size = size
        self.entries = array("i", [EMPTY]) * size
        self.used = 0

    def idx(self, tokens: Sequence[int], start: int = 0) -> int:
        """The slot of the n-gram at ``tokens[start]``."""
        return ngram_hash(tokens, start, self.n, FACTOR, MASK64) % self.size

    def add(self, tokens: Sequence[int], start: int = 0) -> None:
        """The n-gram at ``tokens[start]`` is followed by ``tokens[start + n]``."""
        self.add_run(tokens, start, start + 1)

    def add_run(self, tokens: Sequence[int], start: int, stop: int) -> None:
        """:meth:`add` for each n-gram starting at ``start`` .. ``stop - 1``, in that order."""
        n, size, entries = self.n, self.size, self.entries
        for i, h in enumerate(ngram_hashes(tokens, start, stop, n, FACTOR, MASK64), start):
            slot = h % size
            if entries[slot] == EMPTY:
                self.used += 1
            entries[slot] = tokens[i + n]

    def get(self, tokens: Sequence[int], start: int = 0) -> int:
        """The token after the n-gram at ``tokens[start]``, or :data:`EMPTY`."""
        return self.entries[self.idx(tokens, start)]

    def reset(self) -> None:
        self.entries = array("i", [EMPTY]) * self.size
        self.used = 0

    def follow(self, context: Sequence[int], n_max: int, n_min: int) -> list[int]:
        """The tokens the table chains after ``context`` (its last ``n`` tokens looked up first): up to
        ``n_max``, none when it ends before ``n_min`` (``draft_one``'s loop)."""
        n, size, entries = self.n, self.size, self.entries
        chain = list(context[len(context) - n :])
        h, lead = ngram_hash(chain, 0, n, FACTOR, MASK64), lead_weight(n, FACTOR, MASK64)
        for i in range(n_max):
            token = entries[h % size]
            if token == EMPTY:
                if i < n_min:
                    return []
                break
            chain.append(token)
            h = roll(h, chain[i], token, lead, FACTOR, MASK64)
        return chain[n:]


@dataclass
class ModSeq:
    """``common_speculative_impl_ngram_mod::seq_info``."""

    i_last: int = 0  # the history's n-grams are in the table up to here
    n_draft_last: int = 0  # the length of the last draft
    n_low: int = 0  # drafts in a row with under a quarter accepted


@dataclass
class NgramMod:
    """``common_speculative_impl_ngram_mod`` (``--spec-ngram-mod-n-match``, ``-n-max``, ``-n-min``)."""

    n_match: int = 24
    n_max: int = 64
    n_min: int = 48
    size: int = TABLE_SIZE
    name: str = "ngram-mod"
    table: NgramModTable = field(init=False)
    seqs: dict[int, ModSeq] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.table = NgramModTable(self.n_match, self.size)

    def state(self, seq: int) -> ModSeq:
        return self.seqs.setdefault(seq, ModSeq())

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        info, table = self.state(seq), self.table
        info.i_last = info.n_draft_last = 0
        if len(prompt) < table.n:
            return
        table.add_run(prompt, 0, len(prompt) - table.n)
        info.i_last = len(prompt) - table.n
        if table.used / table.size > OCCUPANCY_RESET:
            table.reset()

    def draft(self, seq: int, history: Sequence[int], last: int, n_max: int, *, alone: bool = True) -> list[int]:
        info, table = self.state(seq), self.table
        info.n_draft_last = 0
        cur_len, n = len(history), table.n
        if cur_len < n:
            return []
        if info.i_last + CHUNK < cur_len:
            table.add_run(history, info.i_last, cur_len - n)
            info.i_last = cur_len - n
        drafted = table.follow([*history[cur_len - n + 1 :], last], self.n_max, self.n_min)
        info.n_draft_last = len(drafted)
        return drafted[: max(n_max, 0)]

    def accept(self, seq: int, n_accepted: int) -> None:
        info = self.state(seq)
        if info.n_draft_last == 0:
            return
        if (n_accepted & 0xFFFF) / info.n_draft_last < 0.25:
            info.n_low += 1
            if info.n_low >= 5:
                self.table.reset()
                info.n_low = info.i_last = 0
        else:
            info.n_low = 0
