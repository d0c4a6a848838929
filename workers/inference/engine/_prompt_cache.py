"""llama-server's prompt cache (``--cache-ram``, ``--cache-idle-slots``): slots' KV state in host RAM.

Why: a slot's cached prompt is lost when another request takes the slot, and
with one KV pool (``-np`` auto, ``--kv-unified``) an idle slot's cells also
lengthen every other slot's attention span. llama-server therefore copies a
slot's state (``llama_state_seq_get_data``) to a RAM cache:

* when a request takes a slot whose cached tokens it would mostly lose (the
  slot was the least recently used one, or keeps under half of its cells);
* with ``--cache-idle-slots`` (the default), every other idle slot when a
  request starts, and with one KV pool also clears it.

A request then takes the cached prompt that shares more of its prompt than
its slot does (``llama_state_seq_set_data`` into the slot's sequence), and that
entry leaves the cache. Sizes: at most ``--cache-ram`` MiB (8192; -1 no limit,
0 off), and the tokens of the context unless the size limit fits more; the
oldest entry goes first. The rules are ``server_prompt_cache``'s in llama.cpp's
``tools/server/server-task.cpp``; docs/architecture.md tells how the engine
uses them.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workers.inference.engine._slots import SLOT_SIMILARITY, Slot, SlotState, common_prefix, holds_media

if TYPE_CHECKING:
    from collections.abc import Callable

    from workers.inference.engine._kept_logits import KeptLogits
    from workers.inference.llama import LlamaModel

MIB = 1024 * 1024
DEFAULT_CACHE_RAM_MIB = 8192  # llama-server's --cache-ram
SAVE_BELOW_KEEP = 0.5  # a slot that keeps less than this share of its cells is saved first
MIN_KEEP = 0.25  # an entry sharing less than this share of its own tokens is not taken


@dataclass
class CachedPrompt:
    """One slot's state as llama.cpp serialised it, with the tokens it holds and their adapter set."""

    tokens: list[int]
    lora: tuple[tuple[int, float], ...]
    data: Any  # a ctypes byte array

    @property
    def size(self) -> int:
        return len(self.data)


class PromptCache:
    """The entries, oldest first, within ``limit_mib`` (<0: no size limit) and ``limit_tokens``."""

    def __init__(self, limit_mib: int, limit_tokens: int) -> None:
        self.limit_size = max(limit_mib, 0) * MIB  # 0: no limit
        self.limit_tokens = limit_tokens
        self.entries: list[CachedPrompt] = []

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def n_tokens(self) -> int:
        return sum(len(e.tokens) for e in self.entries)

    def admits(self, tokens: list[int], lora: tuple[tuple[int, float], ...], size: int) -> bool:
        """Whether a new entry is worth its copy: not already held (as a prefix of an entry), nor
        bigger than the whole cache may be. Entries it contains wholly go, as they are of no more use."""
        if any(e.lora == lora and common_prefix(e.tokens, tokens) == len(tokens) for e in self.entries):
            return False
        if self.limit_size and size > self.limit_size:
            return False
        self.entries = [e for e in self.entries if e.lora != lora or common_prefix(e.tokens, tokens) < len(e.tokens)]
        total = self.size
        while self.entries and self.limit_size and total + size > self.limit_size:
            total -= self.entries.pop(0).size
        return True

    def add(self, entry: CachedPrompt) -> None:
        self.entries.append(entry)
        self.trim()

    def take_better(
        self, held: list[int], prompt: list[int], lora: tuple[tuple[int, float], ...]
    ) -> CachedPrompt | None:
        """The entry that keeps more of itself and covers more of ``prompt`` than ``held`` (the slot's
        tokens) does, removed from the cache; None if none does."""
        if not prompt:
            return None
        n = common_prefix(held, prompt)
        keep_best = n / len(held) if held else -1.0  # an empty slot: any entry wins
        sim_best, best = n / len(prompt), None
        for e in self.entries:
            if e.lora != lora or not e.tokens:
                continue
            lcp = common_prefix(e.tokens, prompt)
            keep, sim = lcp / len(e.tokens), lcp / len(prompt)
            if keep >= MIN_KEEP and keep > keep_best and sim > sim_best:
                keep_best, sim_best, best = keep, sim, e
        if best is not None:
            self.entries.remove(best)
        return best

    def trim(self) -> None:
        """Oldest entries out until the sizes fit; the token limit grows to what the size limit holds."""
        size, n_tokens = self.size, self.n_tokens
        while self.entries and self.limit_size and size > self.limit_size:
            gone = self.entries.pop(0)
            size, n_tokens = size - gone.size, n_tokens - len(gone.tokens)
        per_token = max(1.0, size / max(1, n_tokens))
        limit = max(self.limit_tokens, int(self.limit_size / per_token)) if self.limit_size else self.limit_tokens
        while self.entries and limit and n_tokens > limit:
            n_tokens -= len(self.entries.pop(0).tokens)


def cacheable(slot: Slot) -> bool:
    """A slot whose cells can go to the cache: it holds tokens, none of them an image's stand-in."""
    return bool(slot.cache) and not holds_media(slot)


class PromptCacheMixin:
    """The batch engine's side: save a slot's state to the cache, and take a better one back."""

    llm: LlamaModel | None
    slots: list[Slot]
    kept: KeptLogits
    prompt_cache: PromptCache | None
    cache_idle_slots: bool
    on_debug: Callable[[str], None] | None = None
    """Where llama-server's debug lines of the prompt cache go (its tests wait for them at ``--verbose``):
    the worker logs them as llama.cpp's own, which the console shows at ``-v`` only."""

    def _debug(self, text: str, slot: Slot | None = None) -> None:
        if self.on_debug is not None:
            self.on_debug(f"slot id {slot.id:2d} | {text}" if slot is not None else f"srv  | {text}")

    def _drop_cache(self, slot: Slot) -> None:
        """The slot's cells, tokens and kept logits go."""
        assert self.llm is not None
        self.llm.seq_rm(slot.id, 0, -1)
        self.kept.forget(slot.id)
        slot.cache.clear()

    def _swap_prompt(self, slot: Slot, prompt: list[int], lora: tuple[tuple[int, float], ...], n_common: int) -> int:
        """Before ``prompt`` starts in ``slot``: save what the slot would mostly lose, drop cells of
        another adapter set, and bring back a cached prompt that covers more; the tokens now reusable."""
        cache = self.prompt_cache
        picked_by_lru = n_common < SLOT_SIMILARITY * len(prompt)  # no slot shared enough: pick_slot took the LRU
        # As llama-server, the cache is looked at only when the slot was the least recently used or
        # would lose most of its cells; a slot that shares most of the prompt is used as it is.
        update = cache is not None and bool(prompt) and (picked_by_lru or n_common < SAVE_BELOW_KEEP * len(slot.cache))
        if update:
            self._debug("updating prompt cache", slot)
            self._save_prompt(slot)
        if slot.lora != lora:  # cells computed with other adapters are of no use
            self._drop_cache(slot)
            slot.lora = lora
            n_common = 0
        if cache is None or not update:
            return n_common
        entry = cache.take_better(slot.cache, prompt, lora)
        if entry is None or not self._restore_prompt(slot, entry):
            return n_common
        return common_prefix(slot.cache, prompt)

    def _stash_idle_slots(self, started: Slot) -> None:
        """``--cache-idle-slots``: a request started in ``started``; every other idle slot goes to the
        cache, and with one KV pool leaves it (its cells no longer widen the others' attention)."""
        if self.prompt_cache is None or not self.cache_idle_slots:
            return
        assert self.llm is not None
        for s in self.slots:
            if s is not started and s.state is SlotState.IDLE and s.cache:
                if self._save_prompt(s):  # llama-server's debug line when it saved one
                    self._debug("__TEST_TAG_CACHE_IDLE_SLOT__", s)
                if self.llm.cfg.kv_unified:
                    self._drop_cache(s)

    def _save_prompt(self, slot: Slot) -> bool:
        cache, llm = self.prompt_cache, self.llm
        assert cache is not None and llm is not None
        if not cacheable(slot):
            return False
        size = int(llm.lc.llama_state_seq_get_size(llm.ctx, slot.id))
        if size <= 0 or not cache.admits(slot.cache, slot.lora, size):
            return False
        try:
            data = (ctypes.c_uint8 * size)()
        except MemoryError:  # as llama-server: a smaller cache from now on, and this one not kept
            cache.limit_size = max(1, int(0.4 * cache.size))
            cache.trim()
            return False
        if int(llm.lc.llama_state_seq_get_data(llm.ctx, data, size, slot.id)) != size:
            return False
        cache.add(CachedPrompt(list(slot.cache), slot.lora, data))
        return True

    def _restore_prompt(self, slot: Slot, entry: CachedPrompt) -> bool:
        llm = self.llm
        assert llm is not None
        self._drop_cache(slot)
        if int(llm.lc.llama_state_seq_set_data(llm.ctx, entry.data, entry.size, slot.id)) != entry.size:
            llm.seq_rm(slot.id, 0, -1)  # no room in the KV cache, or a partial load: evaluate afresh
            return False
        slot.cache.extend(entry.tokens)
        slot.lora = entry.lora
        return True
