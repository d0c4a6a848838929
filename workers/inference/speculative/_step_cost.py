"""What a draft costs the slots beside it (modelrouter's, beyond llama-server). Pure.

Every slot's token of a step waits for the whole ``llama_decode``. With a KV stream per slot (an explicit
``-np N``, llama-server's layout for it) llama.cpp splits a batch so that each micro-batch takes the same
number of tokens from each of a run of consecutive sequences (``split_equal``): one slot's ``k`` drafted
tokens beside the others' single tokens take a second pass over the weights, ``k`` rows of it, which the
others wait for. Its acceptance does not pay them back: their own rows are nearly free in a small batch
(one pass reads the weights for all of them), so the drafting slot's early end gives back little.
Measured on Gemma 3 270M, two CPU cores, four 256-token stories of which one loops and drafts 195
tokens, all accepted: the other three took 9.5 s instead of 8.4 s (llama-server alike).

So, with a stream per slot, while some generating slot has no draft, no slot drafts
(:func:`share_drafts`): a slot's speculation is not paid for by the requests beside it. When every
generating slot drafts, each gains from the longer step and the drafts stand; with one KV pool any mix of
rows is one pass and they stand too (the adaptive governor already stops drafts that miss).


On the CPU a step's rows have a cost of their own shape (:func:`fit_tile`): ggml's kernels for repacked
weights (``ggml-cpu/repack.cpp``: Q4_0, Q4_K, IQ4_NL, Q8_0…) multiply four rows at a time and each row
left over on its own, another pass over the weights. Measured on Gemma 3 270M Q4_K_M, two cores, 700
tokens in the cache (ms, median of 15): 4 rows 38, 5 rows 58, 8 rows 57, 9 rows 80, 12 rows 71, 13 rows
86, 48 rows 221, 49 rows 248. One row past a multiple of four costs more than a whole plain step (19 ms),
and a drafted token saves at most one step, so that row's drafted token is dropped.

Two or three rows past are cheaper made a whole tile (:func:`tile_pad`): the engine adds rows that it
computes and throws away, outputs like the drafted rows (the output matrix takes its rows four at a time
too). The same machine, same cache, rows + pad rows (ms, median of 9): 6 57.0, 6+2 50.2; 7 62.8, 7+1
53.2; 14 86.6, 14+2 80.1; 15 91.7, 15+1 80.5; 30 148.6, 30+2 141.3; 31 153.9, 31+1 147.8; 47 227.2, 47+1
194.7; and 45 197.1, 45+3 198.3, 46 203.7, 46+2 207.2 (even). Pads that are not outputs cost the
leftover rows of the output matrix again (7+1: 64.8). One row past, three pad rows cost more than the
dropped token (49 221.0, 49+3 217.1, 48 198.5).
"""

from __future__ import annotations

from collections.abc import Sequence

CPU_TILE = 4
"""Rows ggml's repacked CPU kernels take at a time (``forward_mul_mat``: ``nrows - nrows % 4`` by gemm)."""


def share_drafts(drafts: Sequence[list[int]], *, per_stream: bool) -> list[list[int]]:
    """The drafts of one step's generating slots (in their order): with a KV stream per slot, none while
    some slot has none; otherwise as they are."""
    if per_stream and any(drafts) and not all(drafts):
        return [[] for _ in drafts]
    return list(drafts)


def fit_tile(drafts: Sequence[list[int]], tile: int) -> list[list[int]]:
    """The drafts of a step whose rows (each slot's token and its drafted ones) all go in one micro-batch,
    with the last token of the longest dropped when the rows are one past a multiple of ``tile`` (1: no
    tiles, a GPU's decode); otherwise as they are. Dropping more would lose tokens likelier to pay."""
    rows = sum(1 + len(d) for d in drafts)
    out = list(drafts)
    if tile <= 1 or rows <= tile or rows % tile != 1:
        return out
    longest = max(range(len(out)), key=lambda i: len(out[i]))
    if out[longest]:
        out[longest] = out[longest][:-1]
    return out


def tile_pad(rows: int, tile: int) -> int:
    """Rows to add to a step of ``rows`` in one micro-batch so that they fill their last tile: none at a
    multiple of ``tile``, one past it (:func:`fit_tile` drops a token there instead), or within the first
    tile (fewer than ``tile`` rows are all multiplied one by one, as cheap as a tile)."""
    left = rows % tile if tile > 1 else 0
    return 0 if rows <= tile or left <= 1 else tile - left
