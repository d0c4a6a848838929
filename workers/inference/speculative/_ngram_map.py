"""``ngram-map-k`` and ``ngram-map-k4v``: llama.cpp's ``common_ngram_map_begin``/``_draft``/``_accept``
(``common/ngram-map.cpp``), driven as ``common_speculative_impl_ngram_map_k`` drives them
(``common/speculative.cpp``): one map per sequence, ``n_max`` = ``size_m``.

A map remembers where the n-grams of the sequence's history start (a hash table) and statistics
for the n-grams it has matched (``keys``). ``draft`` looks the last ``size_n`` tokens (the sampled
one included) up, latest earlier occurrence first, and drafts the ``size_m`` tokens that followed
that occurrence, no more than the target accepted of the last draft made from the same key.
``ngram-map-k`` drafts on any match; ``ngram-map-k4v`` counts up to four different m-grams seen
after the key and drafts only once the key was matched ``min_hits`` times and one m-gram occurs at
least twice as often as the others together. ``begin`` forgets what a new prompt no longer holds.

Ported index for index, llama.cpp's quirks included (the regions its searches skip, the match at
``stat_idx`` counted again, k4v drafting the tokens after the match rather than after its most
frequent m-gram). Shaped for Python, with the same results:

* the 2^18-slot ``key_map`` (hash slot -> n-gram index, 0: empty) is a dict of the slots in use, so
  ``begin``'s clean-up walks the entries there are, not every slot;
* the hashes of a step's new n-grams are rolled (:mod:`._ngram_hash`);
* a key's statistics are found through a dict from its tokens to its offset in ``keys`` instead of
  comparing every key: rebuilt after ``begin``, the only place keys go and the history under them
  may change (between two ``begin``s a slot's history only grows);
* where llama.cpp aborts the process (the history shorter than at the last call without a
  ``begin``), this raises :class:`RuntimeError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from workers.inference.speculative._ngram_hash import MASK32, ngram_hash, ngram_hashes

LCG_FACTOR = 2654435761
"""``LCG_FACTOR``: the multiplier of ``common_ngram_map_hash``."""
HASH_MAP_SIZE = 262144
"""``COMMON_NGRAM_HASH_MAP_SIZE``: the slots of ``key_map``."""
MAX_VALUES = 4
"""``COMMON_NGRAM_MAX_VALUES``: the m-grams counted after one key."""
MAX_VALUE_COUNT = 16380
"""``COMMON_NGRAM_MAX_VALUE_COUNT``: where a key's or a value's count stops."""


def _int16(n: int) -> int:
    """``n`` stored in an ``int16_t`` (llama.cpp's ``n_accepted``) after passing through ``uint16_t``."""
    return ((n & 0xFFFF) ^ 0x8000) - 0x8000


@dataclass(slots=True)
class MapValue:
    """``common_ngram_map_value``: an m-gram seen after a key."""

    value_idx: int = 0  # where the m-gram starts in the history (0: unused slot)
    value_num: int = 0  # how often it followed the key
    n_accepted: int = -1  # tokens accepted of the last draft made from it


@dataclass(slots=True)
class MapKey:
    """``common_ngram_map_key``: a key n-gram that matched, and what followed it."""

    key_idx: int  # where the key starts in the history
    values: list[MapValue]
    stat_idx: int = 0  # the history is counted up to here
    key_num: int = 0  # times it matched


@dataclass
class NgramMap:
    """``common_ngram_map``: one sequence's map (``key_map`` as a dict of the slots in use)."""

    size_key: int
    size_value: int
    key_only: bool
    min_hits: int
    keys: list[MapKey] = field(default_factory=list)
    size_last_begin: int = 0
    last_draft_created: bool = False
    last_draft_key_idx: int = 0
    last_draft_value_idx: int = 0
    idx_last_check: int = 0
    key_map: dict[int, int] = field(default_factory=dict)
    key_map_last_idx: int = 0
    key_offsets: dict[tuple[int, ...], int] | None = None  # ours: a key's tokens -> its offset in keys

    def __post_init__(self) -> None:
        self.min_hits &= 0xFFFF  # a uint16_t in llama.cpp: --spec-ngram-map-k4v-min-hits 65536 is 0


def ngram_map_hash(tokens: Sequence[int], start: int, n: int) -> int:
    """``common_ngram_map_hash``: the 32-bit LCG hash of ``tokens[start:start + n]``."""
    return ngram_hash(tokens, start, n, LCG_FACTOR, MASK32)


def ngram_map_begin(state: NgramMap, tokens: Sequence[int]) -> None:
    """``common_ngram_map_begin``: a request starts with ``tokens``; what lies past what the new prompt
    shares with the last one is forgotten (only the length is read, as in llama.cpp)."""
    size_begin = len(tokens)
    cleanup = state.size_last_begin
    if cleanup > size_begin:
        span = state.size_key + state.size_value
        cleanup = size_begin - span if size_begin > span else 0
    if size_begin < state.idx_last_check:
        state.key_map = {slot: idx for slot, idx in state.key_map.items() if idx < cleanup}
        state.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
        if state.keys:
            _forget_keys(state, cleanup)
    state.idx_last_check = size_begin
    state.size_last_begin = size_begin
    state.key_offsets = None


def _forget_keys(state: NgramMap, cleanup: int) -> None:
    """The keys, and (k4v) the values, that start at ``cleanup`` or later go; a key left without a value too."""
    keys = state.keys
    for i in range(len(keys) - 1, -1, -1):
        key = keys[i]
        if key.key_idx >= cleanup:
            del keys[i]
            continue
        if state.key_only:
            continue
        values = key.values
        for j in range(MAX_VALUES - 1, -1, -1):
            if values[j].value_idx != 0 and values[j].value_idx >= cleanup:
                # shift left; the freed last slot keeps its n_accepted, as llama.cpp's does
                values[j:] = [*values[j + 1 :], MapValue(0, 0, values[-1].n_accepted)]
        if values[0].value_idx == 0:
            del keys[i]


def ngram_map_draft(state: NgramMap, inp: Sequence[int], sampled: int) -> list[int]:
    """``common_ngram_map_draft``: the draft after ``inp`` and ``sampled``, or none."""
    state.last_draft_created = False
    state.last_draft_key_idx = 0
    state.last_draft_value_idx = 0
    cur_len = len(inp)
    n, m = state.size_key, state.size_value
    if cur_len < 2 * n + m:
        return []
    if state.idx_last_check > cur_len or state.size_last_begin > cur_len:
        msg = (
            f"ngram-map: the sequence holds {cur_len} tokens, fewer than at its begin ({state.size_last_begin})"
            f" or its last draft ({state.idx_last_check}); llama.cpp aborts here"
        )
        raise RuntimeError(msg)
    state.idx_last_check = cur_len
    key = [*inp[cur_len - n + 1 :], sampled]
    top = cur_len - n - m - 1  # the last start of an n-gram followed by an m-gram and the key
    old_top = state.size_last_begin - n - m - 1  # the same at begin (when positive)
    old_region = state.size_last_begin > n + m + 1
    last_idx = state.key_map_last_idx

    match_pos = 0
    idx_key = state.key_map.get(ngram_map_hash(key, 0, n) % HASH_MAP_SIZE, 0)
    if idx_key != 0 and idx_key < top and _starts_at(inp, idx_key, key):
        match_pos = idx_key
    if match_pos == 0 and old_region:
        match_pos = _latest(inp, key, old_top, last_idx)
    if match_pos == 0:  # a reasoning chat's generated part may go later: searched on its own
        match_pos = _latest(inp, key, top, max(state.size_last_begin, last_idx))

    if old_region:
        _hash_into(state, inp, old_top, last_idx)
    _hash_into(state, inp, top, max(state.size_last_begin, last_idx))
    state.key_map_last_idx = max(top, last_idx)

    if match_pos == 0:
        return []
    offsets = _key_offsets(state, inp)
    offset = offsets.setdefault(tuple(key), len(state.keys))
    if offset == len(state.keys):
        state.keys.append(MapKey(match_pos, [MapValue(n_accepted=m) for _ in range(MAX_VALUES)]))
    curr = state.keys[offset]
    curr.key_num = min(curr.key_num + 1, MAX_VALUE_COUNT)

    if state.key_only:  # value 0 only: its n_accepted
        slot = 0
    else:
        if curr.key_num < state.min_hits:
            return []
        _count_values(curr, inp, key, match_pos, m)
        curr.stat_idx = match_pos
        slot = _dominant(curr.values)
        if slot < 0:
            return []
    n_draft = max(min(m, curr.values[slot].n_accepted), 0)
    state.last_draft_created = True
    state.last_draft_key_idx = offset
    state.last_draft_value_idx = slot
    return list(inp[match_pos + n : match_pos + n + n_draft])


def ngram_map_accept(state: NgramMap, n_accepted: int) -> None:
    """``common_ngram_map_accept``: the value the last draft came from records ``n_accepted``."""
    if not state.last_draft_created or state.last_draft_key_idx >= len(state.keys):
        return  # (past the keys: a begin dropped the key; llama.cpp would write out of bounds)
    state.keys[state.last_draft_key_idx].values[state.last_draft_value_idx].n_accepted = _int16(n_accepted)


def _starts_at(inp: Sequence[int], j: int, key: list[int]) -> bool:
    return inp[j] == key[0] and list(inp[j : j + len(key)]) == key


def _latest(inp: Sequence[int], key: list[int], high: int, low: int) -> int:
    """The largest ``j`` in ``(low, high]`` where ``key`` starts, else 0 (llama.cpp's descending search)."""
    first = key[0]
    for j in range(high, low, -1):
        if inp[j] == first and _starts_at(inp, j, key):
            return j
    return 0


def _occurrences(inp: Sequence[int], key: list[int], start: int, stop: int) -> Iterator[int]:
    """Where ``key`` starts in ``[start, stop)``, ascending (``index`` jumps to the candidates)."""
    first, i = key[0], start
    while i < stop:
        try:
            i = inp.index(first, i, stop)
        except ValueError:
            return
        if _starts_at(inp, i, key):
            yield i
        i += 1


def _hash_into(state: NgramMap, inp: Sequence[int], high: int, low: int) -> None:
    """``key_map`` learns the n-grams starting in ``(low, high]``, descending: a slot keeps its first index."""
    hashes = ngram_hashes(inp, low + 1, high + 1, state.size_key, LCG_FACTOR, MASK32)
    key_map = state.key_map
    for j in range(high, low, -1):
        key_map.setdefault(hashes[j - low - 1] % HASH_MAP_SIZE, j)


def _key_offsets(state: NgramMap, inp: Sequence[int]) -> dict[tuple[int, ...], int]:
    """Each key's tokens in ``inp`` -> the offset of the first key with them (llama.cpp's scan of ``keys``)."""
    if state.key_offsets is None:
        n = state.size_key
        offsets: dict[tuple[int, ...], int] = {}
        for i, k in enumerate(state.keys):
            offsets.setdefault(tuple(inp[k.key_idx : k.key_idx + n]), i)
        state.key_offsets = offsets
    return state.key_offsets


def _count_values(curr: MapKey, inp: Sequence[int], key: list[int], match_pos: int, m: int) -> None:
    """k4v's statistics: each occurrence of the key in ``[stat_idx, match_pos]`` counts the m-gram after
    it, in the slot of an equal m-gram or the first free one; a fifth different m-gram is not counted."""
    n = len(key)
    for i in _occurrences(inp, key, curr.stat_idx, match_pos + 1):
        begin = i + n
        after = list(inp[begin : begin + m])
        for value in curr.values:
            if value.value_idx == 0:
                value.value_idx, value.value_num, value.n_accepted = begin, 0, m
                break
            if list(inp[value.value_idx : value.value_idx + m]) == after:
                break
        else:
            continue
        value.value_num = min(value.value_num + 1, MAX_VALUE_COUNT)


def _dominant(values: list[MapValue]) -> int:
    """The slot of the most frequent m-gram (the first of equals), or -1 when it is not at least twice
    as frequent as the others together."""
    max_occur, slot_max = 0, 0
    for v, value in enumerate(values):
        if value.value_num > max_occur:
            max_occur, slot_max = value.value_num, v
    sum_occur = sum(value.value_num for value in values) - values[slot_max].value_num
    return -1 if sum_occur > 0 and max_occur < 2 * sum_occur else slot_max


@dataclass
class NgramMapK:
    """``common_speculative_impl_ngram_map_k``: ``ngram-map-k`` (``key_only``) or ``ngram-map-k4v``,
    one :class:`NgramMap` per sequence."""

    size_n: int = 12
    size_m: int = 48
    min_hits: int = 1
    key_only: bool = True
    name: str = field(init=False)
    maps: dict[int, NgramMap] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.name = "ngram-map-k" if self.key_only else "ngram-map-k4v"

    @property
    def n_max(self) -> int:
        return self.size_m

    def state(self, seq: int) -> NgramMap:
        """``seq``'s map (a fresh one, as llama.cpp's ``n_seq`` copies start)."""
        found = self.maps.get(seq)
        if found is None:
            found = self.maps[seq] = NgramMap(self.size_n, self.size_m, self.key_only, self.min_hits)
        return found

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        ngram_map_begin(self.state(seq), prompt)

    def draft(self, seq: int, history: Sequence[int], last: int, n_max: int, *, alone: bool = True) -> list[int]:
        return ngram_map_draft(self.state(seq), history, last)[: max(n_max, 0)]

    def accept(self, seq: int, n_accepted: int) -> None:
        ngram_map_accept(self.state(seq), n_accepted)
