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
"""

from __future__ import annotations

from collections.abc import Sequence


def share_drafts(drafts: Sequence[list[int]], *, per_stream: bool) -> list[list[int]]:
    """The drafts of one step's generating slots (in their order): with a KV stream per slot, none while
    some slot has none; otherwise as they are."""
    if per_stream and any(drafts) and not all(drafts):
        return [[] for _ in drafts]
    return list(drafts)
