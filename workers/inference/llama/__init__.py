"""llama.cpp through llama-cpp-python: the bindings, a model and its context, loading, GGUF checks, tokenizing.

* ``_bindings``: the ctypes bindings without the rest of llama-cpp-python until chats need it.
* ``_devices``: ggml's backend devices through ctypes (:func:`devices`, :func:`supports_gpu_offload`).
* ``_model``: :class:`LlamaModel` (vocabulary, KV cache) and :class:`Batch`, the engine's ``llama_batch``.
* ``_load``: :func:`load_llama`, a model and its ``n_parallel``-sequence context, warmed up;
  :class:`Loaded`, what either way of loading returns.
* ``_legacy_load``: :func:`load_model` into ``llama_cpp.Llama`` (the legacy engine).
* ``_log``: :class:`LlamaLog`, llama.cpp's log captured; failures classified (:class:`LoadError`).
* ``_gguf_check``: :func:`inspect_gguf`, a structural check of the file's header.
* ``_tokenize``: :class:`Tokenizer`, linear-time tokenizing of long prompts.
* ``_offload``: :class:`Placement`, the offload fields of ``llama_model_params`` (``-ngl``, ``-ts``, ``-dev``).
* ``_mtmd``: :class:`Projector`, a multimodal projector (``--mmproj``) through ``libmtmd``:
  prompts with images, audio or video (:class:`MediaPrompt`, :class:`VideoOptions`) and their decode into a
  slot's sequence.

Exports load lazily: the GGUF check brings ``gguf`` and numpy (~60 ms), needed only
after a failed load, and the tokenizer only once the model has loaded; the path to
ready imports neither (plain imports would add ~90 ms to it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers import lazy_exports

if TYPE_CHECKING:  # the real types for mypy; at run time each name loads on first use (__getattr__)
    from workers.inference.llama._bindings import complete_import, lowlevel
    from workers.inference.llama._devices import devices, supports_gpu_offload
    from workers.inference.llama._gguf_check import GGUFCheckError, GGUFInfo, inspect_gguf
    from workers.inference.llama._legacy_load import LegacyOptions, LoadedModel, load_model
    from workers.inference.llama._load import Loaded, LoadedLlama, load_llama
    from workers.inference.llama._log import LlamaLog, LoadError, classify_llama_errors
    from workers.inference.llama._lora import LoraError, LoraKey, LoraSet, parse_specs
    from workers.inference.llama._model import (
        CACHE_TYPES,
        FLASH_ATTN,
        LAZY_MODES,
        LOAD_MODES,
        MAX_SLOTS,
        POOLING,
        ROPE_SCALING,
        Batch,
        ContextConfig,
        LlamaModel,
    )
    from workers.inference.llama._mtmd import MEDIA_MARKER, MediaError, MediaPrompt, Projector, VideoOptions
    from workers.inference.llama._offload import Placement
    from workers.inference.llama._tokenize import Tokenizer, TokenizingCancelled, split_for_tokenizing

__all__ = [
    "CACHE_TYPES",
    "FLASH_ATTN",
    "LAZY_MODES",
    "LOAD_MODES",
    "MAX_SLOTS",
    "MEDIA_MARKER",
    "POOLING",
    "ROPE_SCALING",
    "Batch",
    "ContextConfig",
    "GGUFCheckError",
    "GGUFInfo",
    "LegacyOptions",
    "LlamaLog",
    "LlamaModel",
    "LoadError",
    "Loaded",
    "LoadedLlama",
    "LoadedModel",
    "LoraError",
    "LoraKey",
    "LoraSet",
    "MediaError",
    "MediaPrompt",
    "Placement",
    "Projector",
    "Tokenizer",
    "TokenizingCancelled",
    "VideoOptions",
    "classify_llama_errors",
    "complete_import",
    "devices",
    "inspect_gguf",
    "load_llama",
    "load_model",
    "lowlevel",
    "parse_specs",
    "split_for_tokenizing",
    "supports_gpu_offload",
]

_HOMES = {
    "LoraError": "workers.inference.llama._lora",
    "LoraKey": "workers.inference.llama._lora",
    "LoraSet": "workers.inference.llama._lora",
    "parse_specs": "workers.inference.llama._lora",
    "complete_import": "workers.inference.llama._bindings",
    "lowlevel": "workers.inference.llama._bindings",
    "GGUFCheckError": "workers.inference.llama._gguf_check",
    "GGUFInfo": "workers.inference.llama._gguf_check",
    "inspect_gguf": "workers.inference.llama._gguf_check",
    "LegacyOptions": "workers.inference.llama._legacy_load",
    "LoadedModel": "workers.inference.llama._legacy_load",
    "load_model": "workers.inference.llama._legacy_load",
    "Loaded": "workers.inference.llama._load",
    "LoadedLlama": "workers.inference.llama._load",
    "load_llama": "workers.inference.llama._load",
    "LlamaLog": "workers.inference.llama._log",
    "LoadError": "workers.inference.llama._log",
    "classify_llama_errors": "workers.inference.llama._log",
    "Placement": "workers.inference.llama._offload",
    "devices": "workers.inference.llama._devices",
    "supports_gpu_offload": "workers.inference.llama._devices",
    "MEDIA_MARKER": "workers.inference.llama._mtmd",
    "MediaError": "workers.inference.llama._mtmd",
    "MediaPrompt": "workers.inference.llama._mtmd",
    "Projector": "workers.inference.llama._mtmd",
    "VideoOptions": "workers.inference.llama._mtmd",
    "MAX_SLOTS": "workers.inference.llama._model",
    "POOLING": "workers.inference.llama._model",
    "CACHE_TYPES": "workers.inference.llama._model",
    "FLASH_ATTN": "workers.inference.llama._model",
    "LAZY_MODES": "workers.inference.llama._model",
    "LOAD_MODES": "workers.inference.llama._model",
    "ROPE_SCALING": "workers.inference.llama._model",
    "Batch": "workers.inference.llama._model",
    "ContextConfig": "workers.inference.llama._model",
    "LlamaModel": "workers.inference.llama._model",
    "Tokenizer": "workers.inference.llama._tokenize",
    "TokenizingCancelled": "workers.inference.llama._tokenize",
    "split_for_tokenizing": "workers.inference.llama._tokenize",
}

__getattr__ = lazy_exports(__name__, _HOMES)
