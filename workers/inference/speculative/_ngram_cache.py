"""``ngram-cache``: llama.cpp's lookup decoding (``common/ngram-cache.cpp``), driven as
``common_speculative_impl_ngram_cache`` drives it (``common/speculative.cpp``), and its cache files.

A lookup cache maps an n-gram (1 to 4 tokens, padded with ``LLAMA_TOKEN_NULL``) to how often each
token followed it. Three are consulted, one token at a time up to 8: the sequence's own (the
context), then ``--lookup-cache-dynamic``'s, then ``--lookup-cache-static``'s (2-grams of a corpus,
``llama-lookup-create``'s), each with its thresholds, the longest n-gram first, the static counts
weighting the other two. The files are read once, at load; neither is written, as in llama-server.
The context cache is the sequence's for the slot's lifetime: ``begin`` does nothing, and only the
tokens past the longest history seen are added, each call's new ones on their own (n-grams across
the boundary are never counted): llama.cpp's, kept.

Shaped for Python without changing a result: a draft reads only the last 4 tokens, so the drafter
passes those instead of copying the history each step. Not portable, and decided here: llama.cpp
breaks ties between equally counted tokens by ``std::unordered_map``'s iteration order (its
implementation's); here the first counted (or the file's order) wins. An n-gram reaching before the
first token (a history under 3 tokens) is read out of bounds by llama.cpp; here those positions are
``LLAMA_TOKEN_NULL``. A file is read as llama.cpp writes it on a little-endian machine; where
llama.cpp aborts on a missing or corrupt file, :func:`ngram_cache_load` raises
:class:`LookupCacheError` saying what is wrong and where; a tail shorter than one n-gram is
ignored, as llama.cpp's reader does.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

NgramKey = tuple[int, int, int, int]
"""``common_ngram``: ``LLAMA_NGRAM_MAX`` tokens, the unused ones ``LLAMA_TOKEN_NULL``."""
LookupCache = dict[NgramKey, dict[int, int]]
"""``common_ngram_cache``: n-gram -> token -> times it followed."""

NGRAM_MIN = 1
NGRAM_MAX = 4
NGRAM_STATIC = 2
TOKEN_NULL = -1
N_DRAFT = 8
"""``create_state_ngram_cache``'s ``n_draft``: the longest draft."""
_SAMPLE_LAX = (2, 2, 1, 1)  # draft_min_sample_size_lax, by n-gram size - 1
_PERCENT_LAX = (66, 50, 50, 50)
_SAMPLE_STRICT = (4, 3, 2, 2)
_PERCENT_STRICT = (75, 66, 66, 66)


class LookupCacheError(ValueError):
    """A lookup cache file that cannot be read (llama-server aborts on it)."""


def _key(tokens: Sequence[int]) -> NgramKey:
    """``common_ngram(tokens, len(tokens))``."""
    a, b, c, d = (*tokens, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL)[:NGRAM_MAX]
    return (a, b, c, d)


def ngram_cache_update(cache: LookupCache, ngram_min: int, ngram_max: int, inp: Sequence[int], nnew: int) -> None:
    """``common_ngram_cache_update``: count the tokens of the last ``nnew`` of ``inp`` after each of
    their preceding n-grams of ``ngram_min`` to ``ngram_max`` tokens."""
    inp_size = len(inp)
    for size in range(ngram_min, ngram_max + 1):
        for i in range(max(inp_size - nnew, size), inp_size):
            key, token = _key(inp[i - size : i]), inp[i]
            part = cache.get(key)
            if part is None:
                cache[key] = {token: 1}
            else:
                part[token] = part.get(token, 0) + 1


def _last(seq: list[int], size: int) -> NgramKey:
    """The n-gram of the last ``size`` tokens; positions before the first are ``TOKEN_NULL``."""
    short = size - len(seq)
    return _key([TOKEN_NULL] * short + seq if short > 0 else seq[len(seq) - size :])


def _try_static(nc_static: LookupCache, ngram: NgramKey) -> int:
    """``try_draft`` on the static cache alone: its most frequent token, if frequent enough."""
    part = nc_static.get(ngram)
    if part is None:
        return TOKEN_NULL
    max_count, total, max_token = 0, 0, TOKEN_NULL
    for token, count in part.items():
        if count > max_count:
            max_token, max_count = token, count
        total += count
    if total < _SAMPLE_LAX[NGRAM_STATIC - 1] or 100 * max_count < _PERCENT_LAX[NGRAM_STATIC - 1] * total:
        return TOKEN_NULL
    return max_token


def _try_primary(
    nc_primary: LookupCache,
    ngrams: list[NgramKey],
    part_static: dict[int, int],
    min_sample: tuple[int, ...],
    min_percent: tuple[int, ...],
) -> int:
    """``try_draft`` on the context or dynamic cache, the longest n-gram first, each token's count
    weighted by its static count (100 times it, or 1 when the static cache has none)."""
    for i in range(len(ngrams) - 1, -1, -1):
        part = nc_primary.get(ngrams[i])
        if part is None:
            continue
        max_primary, max_static, total, max_token = 0, 0, 0, TOKEN_NULL
        for token, count in part.items():
            weight = 100 * part_static[token] if token in part_static else 1
            if count * weight > max_primary * max_static:
                max_token, max_primary, max_static = token, count, weight
            total += count
        if total < min_sample[i] or 100 * max_primary < min_percent[i] * total:
            continue
        return max_token
    return TOKEN_NULL


def ngram_cache_draft(
    inp: Sequence[int],
    n_draft: int,
    ngram_min: int,
    ngram_max: int,
    nc_context: LookupCache,
    nc_dynamic: LookupCache,
    nc_static: LookupCache,
) -> list[int]:
    """``common_ngram_cache_draft``: up to ``n_draft`` tokens after ``inp`` (the sampled token last);
    only its last ``max(ngram_max, 2)`` tokens and whether it has 2 are read."""
    if len(inp) < NGRAM_STATIC:
        return []
    seq = list(inp[-max(ngram_max, NGRAM_STATIC) :])
    drafted: list[int] = []
    while len(drafted) < n_draft:
        ngram_static = _last(seq, NGRAM_STATIC)
        part_static = nc_static.get(ngram_static, {})
        ngrams = [_last(seq, size) for size in range(ngram_min, ngram_max + 1)]
        token = _try_primary(nc_context, ngrams, part_static, _SAMPLE_LAX, _PERCENT_LAX)
        if token == TOKEN_NULL:
            token = _try_primary(nc_dynamic, ngrams, part_static, _SAMPLE_STRICT, _PERCENT_STRICT)
        if token == TOKEN_NULL:
            token = _try_static(nc_static, ngram_static)
        if token == TOKEN_NULL:
            break
        drafted.append(token)
        seq.append(token)
    return drafted


def _little_endian(ints: array[int]) -> array[int]:
    if sys.byteorder == "big":
        ints.byteswap()
    return ints


def ngram_cache_save(cache: LookupCache, path: str | Path) -> None:
    """``common_ngram_cache_save``: per n-gram its 4 tokens, the number of tokens after it, then each
    token and its count; all ``int32``, little-endian."""
    out = array("i")
    for key, part in cache.items():
        if not part or any(count <= 0 for count in part.values()):
            msg = f"lookup cache: the n-gram {key} has no token or a count under 1"
            raise ValueError(msg)
        out.extend(key)
        out.append(len(part))
        for token, count in part.items():
            out.extend((token, count))
    Path(path).write_bytes(_little_endian(out).tobytes())


def ngram_cache_load(path: str | Path) -> LookupCache:
    """``common_ngram_cache_load``: a file :func:`ngram_cache_save` (or llama.cpp) wrote. The first of a
    repeated n-gram, or of a repeated token in one n-gram, stands (``emplace``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        msg = f"lookup cache {path}: cannot be read ({exc.strerror or exc})"
        raise LookupCacheError(msg) from exc
    ints = array("i")
    ints.frombytes(data[: len(data) - len(data) % ints.itemsize])
    ints = _little_endian(ints)
    cache: LookupCache = {}
    p, end = 0, len(ints)
    while end - p >= NGRAM_MAX:  # a shorter tail ends the file, as llama.cpp's reader
        at = p * ints.itemsize
        key = _key(ints[p : p + NGRAM_MAX])
        p += NGRAM_MAX
        if p >= end:
            raise _corrupt(path, at, "the file ends before its number of tokens")
        ntokens = ints[p]
        p += 1
        if ntokens <= 0:
            raise _corrupt(path, at, f"it has {ntokens} tokens (at least 1)")
        pairs = ints[p : p + 2 * ntokens]
        p += 2 * ntokens
        for k, count in enumerate(pairs[1::2]):
            if count <= 0:
                raise _corrupt(path, at, f"token {pairs[2 * k]} has count {count} (at least 1)")
        if len(pairs) < 2 * ntokens:
            raise _corrupt(path, at, f"the file ends inside its {ntokens} tokens")
        part: dict[int, int] = {}
        for k in range(0, len(pairs), 2):
            part.setdefault(pairs[k], pairs[k + 1])
        cache.setdefault(key, part)
    return cache


def _corrupt(path: str | Path, at: int, why: str) -> LookupCacheError:
    return LookupCacheError(f"lookup cache {path} is corrupt: the n-gram at byte {at}: {why}")


@dataclass
class CacheSeq:
    """``common_speculative_impl_ngram_cache::seq_info`` (the static and dynamic caches are shared:
    they are only read)."""

    cache_size: int = 0  # the history's tokens counted in context, the sampled one included
    context: LookupCache = field(default_factory=dict)


@dataclass
class NgramCache:
    """``common_speculative_impl_ngram_cache``: the sequence's context cache, ``--lookup-cache-dynamic``'s
    and ``--lookup-cache-static``'s (empty without a file)."""

    static: LookupCache = field(default_factory=dict)
    dynamic: LookupCache = field(default_factory=dict)
    n_draft: int = N_DRAFT
    name: str = "ngram-cache"
    seqs: dict[int, CacheSeq] = field(default_factory=dict)

    @property
    def n_max(self) -> int:
        return self.n_draft

    def state(self, seq: int) -> CacheSeq:
        return self.seqs.setdefault(seq, CacheSeq())

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        pass  # llama.cpp's is a no-op: the context cache outlives the request

    def draft(self, seq: int, history: Sequence[int], last: int, n_max: int, *, alone: bool = True) -> list[int]:
        info = self.state(seq)
        if info.cache_size < len(history) + 1:
            new = [*history[info.cache_size :], last]
            ngram_cache_update(info.context, NGRAM_MIN, NGRAM_MAX, new, len(new))
            info.cache_size = len(history) + 1
        tail = [*history[-(NGRAM_MAX - 1) :], last]
        drafted = ngram_cache_draft(tail, self.n_draft, NGRAM_MIN, NGRAM_MAX, info.context, self.dynamic, self.static)
        return drafted[: max(n_max, 0)]

    def accept(self, seq: int, n_accepted: int) -> None:
        pass
