"""Speculative decoding's drafting side (issue 33): llama-server's ``--spec-type`` drafters.

* ``_protocol``: :class:`Drafter`, llama.cpp's ``common_speculative_impl`` for one slot's sequence.
* ``_ngram_simple``: ``ngram-simple``, llama.cpp's ``common_ngram_simple_draft``.
* ``_ngram_map``: ``ngram-map-k`` and ``ngram-map-k4v``, llama.cpp's ``common_ngram_map_*``.
* ``_ngram_mod``: ``ngram-mod``, llama.cpp's ``common_ngram_mod``.
* ``_ngram_cache``: ``ngram-cache``, llama.cpp's lookup decoding and its ``-lcs``/``-lcd`` files.
* ``_ngram_hash``: the rolled n-gram hash ``ngram-map`` and ``ngram-mod`` share.
* ``_adaptive``: :class:`DraftGovernor`, a slot's draft limit from its recent acceptance (ours).
* ``_speculator``: :class:`Speculator`, the drafters in llama.cpp's order and each slot's governor.
* ``_synthetic``: :class:`SynthAcceptance`, llama-server's ``--spec-synth-*`` benchmarking aid.

The verification is the batch engine's (:mod:`workers.inference.engine._speculate`): the drafted
tokens go into the step's one ``llama_decode`` beside the other slots' tokens, and the request's own
sampler chain decides, row by row, how many of them stand.
"""

from __future__ import annotations

from service.core.launch_speculative import SpeculativeOptions
from workers.inference.speculative._adaptive import DraftGovernor
from workers.inference.speculative._ngram_cache import LookupCache, LookupCacheError, NgramCache, ngram_cache_load
from workers.inference.speculative._ngram_map import NgramMapK
from workers.inference.speculative._ngram_mod import NgramMod
from workers.inference.speculative._ngram_simple import SHORT_NGRAMS, NgramSimple, ngram_simple_draft
from workers.inference.speculative._protocol import Drafter
from workers.inference.speculative._speculator import Speculator
from workers.inference.speculative._step_cost import CPU_TILE, tile_pad
from workers.inference.speculative._synthetic import LLAMA_DEFAULT_SEED, SynthAcceptance, SynthError, resolve_rates

__all__ = [
    "CPU_TILE",
    "LLAMA_DEFAULT_SEED",
    "SHORT_NGRAMS",
    "DraftGovernor",
    "Drafter",
    "NgramCache",
    "NgramMapK",
    "NgramMod",
    "NgramSimple",
    "Speculator",
    "SynthAcceptance",
    "UnsupportedSpeculation",
    "make_speculator",
    "ngram_simple_draft",
    "tile_pad",
]


HEADS = frozenset({"draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark"})
"""The drafting heads shipped beside models, which llama.cpp runs from ``common/speculative.cpp``."""


class UnsupportedSpeculation(ValueError):
    """A ``--spec-type`` this worker cannot run, or a lookup cache it cannot read (the load fails
    with the reason, where llama-server aborts)."""


def make_speculator(options: SpeculativeOptions, n_seq: int, draft: Drafter | None = None) -> Speculator | None:
    """The drafters ``options`` ask for, or None without speculation; ``draft``: draft-simple's, loaded
    by the engine (it needs the model)."""
    synthetic = options.spec_synth_len is not None or options.spec_synth_rates is not None
    if options.spec_type == "none":
        if synthetic:
            raise UnsupportedSpeculation("synthetic acceptance requires an initialized speculative decoding context")
        return None
    drafters = [
        draft if name == "draft-simple" and draft is not None else _drafter(name, options)
        for name in options.spec_type.split(",")
    ]
    speculator = Speculator(drafters, n_seq, adaptive=options.spec_adaptive)
    if synthetic:
        speculator.synthetic = SynthAcceptance(_synth_rates(options, speculator.n_max))
    return speculator


def _synth_rates(options: SpeculativeOptions, n_max: int) -> list[float]:
    """The per-position rates ``--spec-synth-len`` or ``--spec-synth-rates`` ask for, checked against
    the drafters' ``n_max`` (llama.cpp's refusal, in its words, fails the load)."""
    given = options.spec_synth_rates
    rates = [float(r) for r in given.split(",")] if given else []
    try:
        return resolve_rates(options.spec_synth_len, rates, n_max)
    except SynthError as exc:
        raise UnsupportedSpeculation(f"failed to initialize speculative decoding context: {exc}") from None


def _drafter(name: str, o: SpeculativeOptions) -> Drafter:
    """``--spec-type`` ``name``'s drafter, with its options (``common_speculative_init``)."""
    if name == "ngram-simple":  # adaptive drafting also looks up shorter n-grams (ours)
        fallback = SHORT_NGRAMS if o.spec_adaptive else ()
        return NgramSimple(o.spec_ngram_simple_size_n, o.spec_ngram_simple_size_m, fallback=fallback)
    if name == "ngram-map-k":
        return NgramMapK(o.spec_ngram_map_k_size_n, o.spec_ngram_map_k_size_m, o.spec_ngram_map_k_min_hits)
    if name == "ngram-map-k4v":
        return NgramMapK(
            o.spec_ngram_map_k4v_size_n, o.spec_ngram_map_k4v_size_m, o.spec_ngram_map_k4v_min_hits, key_only=False
        )
    if name == "ngram-mod":
        return NgramMod(o.spec_ngram_mod_n_match, o.spec_ngram_mod_n_max, o.spec_ngram_mod_n_min)
    if name == "ngram-cache":
        static = _lookup_cache("--lookup-cache-static", o.lookup_cache_static)
        return NgramCache(static=static, dynamic=_lookup_cache("--lookup-cache-dynamic", o.lookup_cache_dynamic))
    if name in HEADS:
        msg = (
            f"--spec-type {name}: drafting heads cannot run in this worker: the hidden-state calls they need "
            "(llama_set_embeddings_nextn, llama_get_embeddings_layer_inp, llama_model_target_layer_ids) are "
            "C++ internals of llama.cpp, outside its C API, and llama-cpp-python's library does not bind them"
        )
    else:
        msg = f"--spec-type {name}: not available in this worker"
    raise UnsupportedSpeculation(msg)


def _lookup_cache(flag: str, path: str | None) -> LookupCache:
    """The file's cache; none without a path (llama.cpp's empty string too)."""
    if not path:
        return {}
    try:
        return ngram_cache_load(path)
    except LookupCacheError as exc:
        raise UnsupportedSpeculation(f"{flag}: {exc}") from exc
