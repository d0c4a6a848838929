"""The launch's speculative-decoding rows: llama-server's ``--spec-type`` and the n-gram drafters'
parameters (``--spec-ngram-*``), llama-server's synthetic acceptance for benchmarks (``--spec-synth-*``),
and modelrouter's adaptive drafting (issue 33).

:class:`SpeculativeOptions` sits between :class:`~service.core.launch_devices.DeviceOptions` and
:class:`~service.core.launch.InferenceLaunch`: its fields are rows of the same option table. The
defaults are llama-server's (``common/common.h`` at the vendored commit): no speculation; n-gram
lookups of 12 tokens drafting up to 48; ``ngram-mod`` matching 24 and drafting 48 to 64; no lookup
cache files for ``ngram-cache``. Each value is checked as ``common/arg.cpp`` checks it.

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.core.launch_devices import DeviceOptions, device_list, gpu_layers
from service.core.launch_rows import CACHE_TYPES, option

PRIORITY = (
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
)
"""The order llama.cpp tries the drafters in (``common_speculative_init``), whatever order was given:
a step takes the first non-empty draft."""
SPEC_TYPES = ("none", *PRIORITY)
"""llama.cpp's ``common_speculative_type_from_name_map``: every ``--spec-type`` name."""


def spec_types(value: str) -> str:
    """llama-server's ``--spec-type`` list, normalised (comma-separated, no repeats, llama.cpp's
    priority order); ``none`` anywhere means none, an unknown name is llama.cpp's error."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names:
        if name not in SPEC_TYPES:
            msg = f"unknown speculative type: {name}"
            raise ValueError(msg)
    if not names or "none" in names:
        return "none"
    return ",".join(t for t in PRIORITY if t in names)


def _size(flag: str, low: int = 1) -> Callable[[str], int]:
    """A drafter's size: a count from ``low`` to 1024 (llama.cpp keeps n-gram sizes in 16 bits)."""

    def parse(value: str) -> int:
        n = int(value)
        if not low <= n <= 1024:
            msg = f"invalid value for {flag}: '{value}' ({low} to 1024)"
            raise ValueError(msg)
        return n

    return parse


def _min_hits(flag: str) -> Callable[[str], int]:
    """An n-gram map's ``min-hits``: at least 1 and no upper bound, as ``arg.cpp`` checks it (the
    drafter keeps it in 16 bits, as llama.cpp's ``uint16_t`` field does)."""

    def parse(value: str) -> int:
        n = int(value)
        if n < 1:
            msg = f"invalid value for {flag}: '{value}' (at least 1)"
            raise ValueError(msg)
        return n

    return parse


def _count(flag: str) -> Callable[[str], int]:
    """A count of 0 or more (llama.cpp's ``invalid value`` for a negative one)."""

    def parse(value: str) -> int:
        n = int(value)
        if n < 0:
            msg = f"invalid value for {flag}: '{value}'"
            raise ValueError(msg)
        return n

    return parse


def parse_synth_len(value: str) -> float:
    """``--spec-synth-len``'s text, as ``arg.cpp`` reads it (``-1``, its "unset", is invalid)."""
    try:
        length = float(value.strip())
    except ValueError:
        length = -1.0
    if length == -1.0:
        msg = f"invalid value for --spec-synth-len: '{value}'"
        raise ValueError(msg)
    return length


def parse_synth_rates(value: str) -> str:
    """``--spec-synth-rates``'s comma-separated numbers, normalised (checked against ``n_max`` at load)."""
    try:
        rates = [float(raw.strip()) for raw in value.split(",")]
    except ValueError:
        msg = f"invalid value for --spec-synth-rates: '{value}'"
        raise ValueError(msg) from None
    return ",".join(repr(r) for r in rates)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeOptions(DeviceOptions):
    """How the worker drafts tokens for its slots (the batch engine verifies them, one decode a step)."""

    spec_type: str = option(
        "none",
        "--spec-type",
        "context",
        "spec-type",
        "LLAMA_ARG_SPEC_TYPE",
        parse=spec_types,
        help="comma-separated drafters: " + ", ".join(SPEC_TYPES),
    )
    spec_ngram_simple_size_n: int = option(
        12,
        "--spec-ngram-simple-size-n",
        "context",
        "spec-ngram-simple-size-n",
        parse=_size("--spec-ngram-simple-size-n"),
        help="ngram-simple: tokens looked up",
    )
    spec_ngram_simple_size_m: int = option(
        48,
        "--spec-ngram-simple-size-m",
        "context",
        "spec-ngram-simple-size-m",
        parse=_size("--spec-ngram-simple-size-m"),
        help="ngram-simple: tokens drafted after a match",
    )
    spec_ngram_simple_min_hits: int = option(
        1,
        "--spec-ngram-simple-min-hits",
        "context",
        "spec-ngram-simple-min-hits",
        parse=_size("--spec-ngram-simple-min-hits"),
        help="ngram-simple: accepted, as llama.cpp's, which does not read it",
    )
    spec_draft_model: str | None = option(
        None,
        "--spec-draft-model -md --model-draft",
        "context",
        "model-draft",
        "LLAMA_ARG_SPEC_DRAFT_MODEL",
        help="draft-simple's model (a GGUF whose vocabulary matches the target's), run in the worker",
    )
    spec_draft_n_max: int = option(
        3,
        "--spec-draft-n-max",
        "context",
        "spec-draft-n-max",
        "LLAMA_ARG_SPEC_DRAFT_N_MAX",
        parse=_count("--spec-draft-n-max"),
        help="draft-simple: the most tokens drafted a step",
    )
    spec_draft_n_min: int = option(
        0,
        "--spec-draft-n-min",
        "context",
        "spec-draft-n-min",
        "LLAMA_ARG_SPEC_DRAFT_N_MIN",
        parse=int,
        help="draft-simple: a shorter draft is dropped",
    )
    spec_draft_p_min: float = option(
        0.0,
        "--spec-draft-p-min --draft-p-min",
        "context",
        "draft-p-min",
        "LLAMA_ARG_SPEC_DRAFT_P_MIN",
        parse=float,
        help="draft-simple: drafting stops at a token the draft model gives less probability",
    )
    spec_draft_threads: int | None = option(
        None,
        "--spec-draft-threads -td --threads-draft",
        "context",
        "threads-draft",
        parse=int,
        help="draft-simple: the draft's threads (default: the target's)",
    )
    spec_draft_threads_batch: int | None = option(
        None,
        "--spec-draft-threads-batch -tbd --threads-batch-draft",
        "context",
        "threads-batch-draft",
        parse=int,
        help="draft-simple: the draft's threads for prompts (default: --spec-draft-threads)",
    )
    spec_draft_type_k: str = option(
        "f16",
        "--spec-draft-type-k -ctkd --cache-type-k-draft",
        "context",
        "cache-type-k-draft",
        "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K",
        choices=CACHE_TYPES,
        help="draft-simple: the draft's KV cache type for K",
    )
    spec_draft_type_v: str = option(
        "f16",
        "--spec-draft-type-v -ctvd --cache-type-v-draft",
        "context",
        "cache-type-v-draft",
        "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V",
        choices=CACHE_TYPES,
        help="draft-simple: the draft's KV cache type for V",
    )
    spec_draft_ngl: str = option(
        "auto",
        "--spec-draft-ngl -ngld --gpu-layers-draft --n-gpu-layers-draft",
        "context",
        "n-gpu-layers-draft",
        "LLAMA_ARG_N_GPU_LAYERS_DRAFT",
        parse=gpu_layers,
        help="draft-simple: the draft's layers in VRAM: a number, 'auto' or 'all'",
    )
    spec_draft_device: str | None = option(
        None,
        "--spec-draft-device -devd --device-draft",
        "context",
        "device-draft",
        parse=device_list,
        help="draft-simple: devices for the draft (none: offload nothing; default: the target's --device)",
    )
    spec_ngram_map_k_size_n: int = option(
        12,
        "--spec-ngram-map-k-size-n",
        "context",
        "spec-ngram-map-k-size-n",
        parse=_size("--spec-ngram-map-k-size-n"),
        help="ngram-map-k: tokens looked up",
    )
    spec_ngram_map_k_size_m: int = option(
        48,
        "--spec-ngram-map-k-size-m",
        "context",
        "spec-ngram-map-k-size-m",
        parse=_size("--spec-ngram-map-k-size-m"),
        help="ngram-map-k: tokens drafted after a match",
    )
    spec_ngram_map_k_min_hits: int = option(
        1,
        "--spec-ngram-map-k-min-hits",
        "context",
        "spec-ngram-map-k-min-hits",
        parse=_min_hits("--spec-ngram-map-k-min-hits"),
        help="ngram-map-k: accepted, as llama.cpp's, which does not read it",
    )
    spec_ngram_map_k4v_size_n: int = option(
        12,
        "--spec-ngram-map-k4v-size-n",
        "context",
        "spec-ngram-map-k4v-size-n",
        parse=_size("--spec-ngram-map-k4v-size-n"),
        help="ngram-map-k4v: tokens looked up",
    )
    spec_ngram_map_k4v_size_m: int = option(
        48,
        "--spec-ngram-map-k4v-size-m",
        "context",
        "spec-ngram-map-k4v-size-m",
        parse=_size("--spec-ngram-map-k4v-size-m"),
        help="ngram-map-k4v: tokens drafted after a match",
    )
    spec_ngram_map_k4v_min_hits: int = option(
        1,
        "--spec-ngram-map-k4v-min-hits",
        "context",
        "spec-ngram-map-k4v-min-hits",
        parse=_min_hits("--spec-ngram-map-k4v-min-hits"),
        help="ngram-map-k4v: times a key must have been seen before it drafts",
    )
    spec_ngram_mod_n_min: int = option(
        48,
        "--spec-ngram-mod-n-min",
        "context",
        "spec-ngram-mod-n-min",
        parse=_size("--spec-ngram-mod-n-min", 0),
        help="ngram-mod: fewest tokens a draft may have",
    )
    spec_ngram_mod_n_max: int = option(
        64,
        "--spec-ngram-mod-n-max",
        "context",
        "spec-ngram-mod-n-max",
        parse=_size("--spec-ngram-mod-n-max", 0),
        help="ngram-mod: most tokens a draft may have",
    )
    spec_ngram_mod_n_match: int = option(
        24,
        "--spec-ngram-mod-n-match",
        "context",
        "spec-ngram-mod-n-match",
        parse=_size("--spec-ngram-mod-n-match"),
        help="ngram-mod: tokens looked up",
    )
    lookup_cache_static: str | None = option(
        None,
        "--lookup-cache-static -lcs",
        "context",
        "lookup-cache-static",
        help="ngram-cache: a static lookup cache file (llama-lookup-create's), read once at load",
    )
    lookup_cache_dynamic: str | None = option(
        None,
        "--lookup-cache-dynamic -lcd",
        "context",
        "lookup-cache-dynamic",
        help="ngram-cache: a dynamic lookup cache file, read once at load (llama-server does not update it either)",
    )
    spec_adaptive: bool = option(
        True,
        "--spec-adaptive",
        "context",
        help="modelrouter's: a slot whose drafts miss drafts fewer, down to none for a while",
    )
    spec_synth_len: float | None = option(
        None,
        "--spec-synth-len",
        "context",
        "spec-synth-len",
        "LLAMA_ARG_SPEC_SYNTH_LEN",
        parse=parse_synth_len,
        help="benchmarking only: drafts stand at random for this mean accepted length (the step's token included)",
    )
    spec_synth_rates: str | None = option(
        None,
        "--spec-synth-rates",
        "context",
        "spec-synth-rates",
        "LLAMA_ARG_SPEC_SYNTH_RATES",
        parse=parse_synth_rates,
        help="benchmarking only: each drafted position's chance to stand, one per token of n_max",
    )
