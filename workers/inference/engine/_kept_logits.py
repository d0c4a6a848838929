"""Logits kept when a request ends, so an exact repeat of what its slot holds samples without a decode.

Why: when a prompt is wholly cached, llama-server (and this engine before)
evaluates its last token again to get logits back: one full ``llama_decode``,
the output layer over the whole vocabulary included. On Gemma 3 270M that
decode is nearly all of a 1-token request (~20 ms on a quiet 2-core VM of
~25 ms, see docs/benchmarks.md), while ``llama_cpp.Llama`` (the legacy engine)
samples straight from the logits its last decode left. Keeping one row per
slot gives the batch engine the same shortcut: a request whose prompt equals
its slot's cached tokens samples its first token from the kept row and goes
on decoding from there.

Cost: one copy of ``n_vocab`` floats per finished request (1 MiB for Gemma's
262,144 entries, ~0.1 ms), one row per slot kept, :data:`MAX_ROWS` at most. Sampling replays
``llama_sampler_sample``'s CPU path on the kept row: every token in
vocabulary order with its logit and ``p`` 0, the request's chain applied, the
selected candidate accepted. So the token is the one the chain picks from
those logits, which are the ones the first request sampled from
(``tests/workers/inference/engine/test_kept_logits.py`` compares the two paths).
"""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Row = npt.NDArray[np.float32]


def logits_row(lc: Any, ctx: Any, index: int, n_vocab: int) -> Row:
    """A zero-copy view of batch row ``index``'s logits (valid until the next decode)."""
    import numpy as np

    ptr = lc.llama_get_logits_ith(ctx, index)
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))


TokenLogprobs = tuple[float, list[int], list[float]]
"""A sampled token's log-probability, and the likeliest tokens with theirs (:func:`token_logprobs`'s shape)."""


def _log(p: float) -> float:
    return math.log(p) if p > 0.0 else -math.inf


MAX_ROWS = 8
"""Rows kept at most, whatever ``--n-parallel`` is (8 MiB for Gemma's vocabulary); the slot whose
request ended longest ago gives its row up first."""


class KeptLogits:
    """Per slot: the tokens it held when its last request ended, and the logits after them."""

    def __init__(self, lc: Any = None, n_vocab: int = 0) -> None:
        self.lc = lc  # both set once the model has loaded
        self.n_vocab = n_vocab
        self._rows: dict[int, tuple[list[int], Row]] = {}  # oldest first
        self._free: list[Row] = []  # buffers of forgotten rows, reused
        self._candidates: Any = None  # llama_token_data[n_vocab] as a numpy record array, made once

    def keep(self, slot_id: int, ctx: Any, index: int, tokens: list[int]) -> None:
        """Copy batch row ``index`` (the logits after ``tokens``) before the next decode overwrites it."""
        row = self._buffer(slot_id)
        row[:] = logits_row(self.lc, ctx, index, self.n_vocab)
        self._rows[slot_id] = (list(tokens), row)

    def _buffer(self, slot_id: int) -> Row:
        import numpy as np

        old = self._rows.pop(slot_id, None)
        if old is not None:
            return old[1]
        if self._free:
            return self._free.pop()
        if len(self._rows) < MAX_ROWS:
            return np.empty(self.n_vocab, dtype=np.float32)
        return self._rows.pop(next(iter(self._rows)))[1]

    def forget(self, slot_id: int) -> None:
        """The slot's cells changed outside a request (dropped, restored, new LoRA scales)."""
        old = self._rows.pop(slot_id, None)
        if old is not None:
            self._free.append(old[1])

    def take(self, slot_id: int, prompt: list[int], cache: list[int]) -> Row | None:
        """Forget the slot's row (a request starts there, its cells change), returning it if the
        slot holds exactly ``prompt`` and the row is the logits after it."""
        kept = self._rows.pop(slot_id, None)
        if kept is None:
            return None
        self._free.append(kept[1])
        same = len(kept[0]) == len(prompt) == len(cache) and kept[0] == prompt == cache
        return kept[1] if same else None

    def put_back(self, slot_id: int, tokens: list[int], row: Row) -> None:
        """Keep ``row`` again: the request that took it ended at its first token, nothing changed."""
        self._free = [r for r in self._free if r is not row]
        self._rows[slot_id] = (list(tokens), row)

    def sample(self, chain: Any, row: Row) -> int:
        """What ``llama_sampler_sample(chain, ctx, i)`` does on logits ``row``: apply, pick, accept."""
        return self._apply(chain, row)[0]

    def sample_post(self, chain: Any, row: Row, n_probs: int) -> tuple[int, TokenLogprobs]:
        """:meth:`sample`, and llama-server's ``post_sampling_probs``: the candidates the chain left,
        by probability (``common_sampler_get_candidates``), the sampled one's and the ``n_probs`` first
        with a probability above 0, as log-probabilities (what :func:`token_logprobs` answers)."""
        token, arr = self._apply(chain, row)
        left = [(float(arr.data[i].p), int(arr.data[i].id)) for i in range(arr.size)]
        chosen = next((p for p, t in left if t == token), 0.0)
        best = sorted(left, key=lambda c: -c[0])[: max(n_probs, 0)]
        best = [(p, t) for p, t in best if p > 0.0]
        return token, (_log(chosen), [t for _, t in best], [_log(p) for p, _ in best])

    def _apply(self, chain: Any, row: Row) -> tuple[int, Any]:
        """Apply ``chain`` to ``row``'s candidates, accept its pick; the token and what is left of them."""
        lc = self.lc
        cands = self._fresh_candidates(row)
        arr = lc.llama_token_data_array(
            data=cands.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)), size=self.n_vocab, selected=-1, sorted=False
        )
        lc.llama_sampler_apply(chain, ctypes.byref(arr))
        if not 0 <= arr.selected < arr.size:
            raise RuntimeError(f"the sampler chain selected no token ({arr.selected})")
        token = int(arr.data[arr.selected].id)
        lc.llama_sampler_accept(chain, token)
        return token, arr

    def _fresh_candidates(self, row: Row) -> Any:
        import numpy as np

        if self._candidates is None:
            layout = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
            if layout.itemsize != ctypes.sizeof(self.lc.llama_token_data):
                raise RuntimeError("llama_token_data is not (int32, float, float)")
            self._candidates = np.empty(self.n_vocab, dtype=layout)
        cands = self._candidates
        cands["id"] = np.arange(self.n_vocab, dtype=np.int32)  # the chain sorts and truncates in place
        cands["logit"] = row
        cands["p"] = 0.0
        return cands
