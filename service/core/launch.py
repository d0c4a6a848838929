"""The launch of an inference worker, as one typed value built from one table of options.

:class:`InferenceLaunch` is that table: each field is one option, declared with :func:`option`,
which records its llama-server key and ``LLAMA_ARG_*`` variable, the worker's flags, and where
the value goes in the worker (:data:`Goes`). Everything else is derived from the fields:

* :meth:`InferenceLaunch.from_params`: from a model's parameters as the log records them (the
  ``params`` of ``model_configured`` and ``instance_requested``, built by
  :func:`service.llamacpp.options.translate` from the merged command line, env and preset);
* :meth:`InferenceLaunch.to_argv`: the worker's command line (a flag for each value that is not
  the worker's default);
* :meth:`InferenceLaunch.add_arguments` and :meth:`InferenceLaunch.from_namespace` (or
  :meth:`InferenceLaunch.from_argv`): the worker's parse of that command line.

Adding an option is adding one field here (and, for a llama-server option, its conversion in
``service/llamacpp/options.py`` when it is more than a value). Pure module: stdlib only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.core.event_base import JSON
from service.core.launch_rows import (
    ABSENT,
    CACHE_TYPES,
    LAZY_MODES,
    LOAD_MODES,
    POOLING,
    REASONING_FORMATS,
    ROPE_SCALING,
    Goes,
    Option,
    flash_attn,
    option,
    reasoning_mode,
)
from service.core.launch_speculative import SpeculativeOptions

Params = Mapping[str, JSON]
"""A model's parameters as the log records them (``model_configured``, ``instance_requested``):
free-form on purpose, as a stored event keeps keys this version does not know (the audit trail);
:meth:`InferenceLaunch.from_params` reads the ones it does."""
_YARN = "YaRN, as llama-server (default: the model's)"


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceLaunch(SpeculativeOptions):
    """How one inference worker runs its model: every option the service passes it, typed.

    Each field is one row of the option table (see :func:`option`); its default is the worker's.
    """

    # --- the context: llama_context_params and the batch engine's context ---
    n_ctx: int = option(
        4096,
        "--n-ctx -c --ctx-size",
        "context",
        "ctx-size",
        "LLAMA_ARG_CTX_SIZE",
        parse=int,
        help="whole context, n_ctx / n_parallel per slot; 0 = training context",
    )
    n_threads: int | None = option(
        None, "--n-threads", "context", "threads", "LLAMA_ARG_THREADS", parse=int, help="default: all"
    )
    n_threads_batch: int | None = option(
        None, "--n-threads-batch", "context", "threads-batch", parse=int, help="default: --n-threads"
    )
    n_batch: int = option(
        2048,
        "--n-batch -b --batch-size",
        "context",
        "batch-size",
        "LLAMA_ARG_BATCH",
        parse=int,
        help="logical maximum batch size (llama-server's 2048): prompts of requests that arrive together share a step",
    )
    n_ubatch: int = option(
        512,
        "--ubatch-size -ub",
        "context",
        "ubatch-size",
        "LLAMA_ARG_UBATCH",
        parse=int,
        help="physical maximum batch size",
    )
    flash_attn: str = option(
        "auto",
        "--flash-attn -fa",
        "context",
        "flash-attn",
        "LLAMA_ARG_FLASH_ATTN",
        parse=flash_attn,
        help="on, off or auto (llama.cpp's)",
    )
    cache_type_k: str = option(
        "f16",
        "--cache-type-k -ctk",
        "context",
        "cache-type-k",
        "LLAMA_ARG_CACHE_TYPE_K",
        choices=CACHE_TYPES,
        help="KV cache data type for K",
    )
    cache_type_v: str = option(
        "f16",
        "--cache-type-v -ctv",
        "context",
        "cache-type-v",
        "LLAMA_ARG_CACHE_TYPE_V",
        choices=CACHE_TYPES,
        help="KV cache data type for V",
    )
    kv_unified: bool = option(
        False,
        "--kv-unified",
        "context",
        "kv-unified",
        "LLAMA_ARG_KV_UNIFIED",
        help="one KV pool for all slots (each may use all of -c)",
    )
    swa_full: bool = option(
        False,
        "--swa-full",
        "context",
        "swa-full",
        "LLAMA_ARG_SWA_FULL",
        help="full-size cache for sliding-window layers",
    )
    kv_offload: bool = option(
        True,
        "--kv-offload",
        "context",
        "kv-offload",
        "LLAMA_ARG_KV_OFFLOAD",
        llama="offload_kqv",
        help="the KV cache and its attention ops on the GPU (--no-kv-offload: in RAM); nothing to move on a CPU",
    )
    embedding: bool = option(
        False,
        "--embedding --embeddings",
        "context",
        "embeddings",
        "LLAMA_ARG_EMBEDDINGS",
        help="serve /embedding and /v1/embeddings",
    )
    pooling: str | None = option(
        None,
        "--pooling",
        "context",
        "pooling",
        "LLAMA_ARG_POOLING",
        choices=POOLING,
        help="pooling of embeddings (default: the model's)",
    )
    warmup: bool = option(True, "--warmup", "context", "warmup", help="an empty run before ready")
    rope_scaling: str | None = option(
        None,
        "--rope-scaling",
        "context",
        "rope-scaling",
        "LLAMA_ARG_ROPE_SCALING_TYPE",
        choices=ROPE_SCALING,
        llama="rope_scaling_type",
        help="RoPE frequency scaling method",
    )
    rope_freq_base: float | None = option(
        None,
        "--rope-freq-base",
        "context",
        "rope-freq-base",
        "LLAMA_ARG_ROPE_FREQ_BASE",
        parse=float,
        llama="rope_freq_base",
        help=_YARN,
    )
    rope_freq_scale: float | None = option(
        None,
        "--rope-freq-scale",
        "context",
        "rope-freq-scale",
        "LLAMA_ARG_ROPE_FREQ_SCALE",
        parse=float,
        llama="rope_freq_scale",
        help=_YARN,
    )
    yarn_ext_factor: float | None = option(
        None,
        "--yarn-ext-factor",
        "context",
        "yarn-ext-factor",
        "LLAMA_ARG_YARN_EXT_FACTOR",
        parse=float,
        llama="yarn_ext_factor",
        help=_YARN,
    )
    yarn_attn_factor: float | None = option(
        None,
        "--yarn-attn-factor",
        "context",
        "yarn-attn-factor",
        "LLAMA_ARG_YARN_ATTN_FACTOR",
        parse=float,
        llama="yarn_attn_factor",
        help=_YARN,
    )
    yarn_beta_slow: float | None = option(
        None,
        "--yarn-beta-slow",
        "context",
        "yarn-beta-slow",
        "LLAMA_ARG_YARN_BETA_SLOW",
        parse=float,
        llama="yarn_beta_slow",
        help=_YARN,
    )
    yarn_beta_fast: float | None = option(
        None,
        "--yarn-beta-fast",
        "context",
        "yarn-beta-fast",
        "LLAMA_ARG_YARN_BETA_FAST",
        parse=float,
        llama="yarn_beta_fast",
        help=_YARN,
    )
    yarn_orig_ctx: int | None = option(
        None,
        "--yarn-orig-ctx",
        "context",
        "yarn-orig-ctx",
        "LLAMA_ARG_YARN_ORIG_CTX",
        parse=int,
        llama="yarn_orig_ctx",
        help="YaRN: original context size of the model",
    )
    # --- the model: llama_model_params, LoRA adapters ---
    load_mode: str | None = option(
        None,
        "--load-mode -lm",
        "model",
        "load-mode",
        "LLAMA_ARG_LOAD_MODE",
        choices=LOAD_MODES,
        llama="load_mode",
        help="mmap, mlock, ... (auto)",
    )
    lazy_mode: str | None = option(
        None,
        "--lazy-mode -lzm",
        "model",
        "lazy-mode",
        "LLAMA_ARG_LAZY_MODE",
        choices=LAZY_MODES,
        llama="lazy_mode",
        help="tensors read on demand",
    )
    repack: bool = option(True, "--repack", "model", "repack", "LLAMA_ARG_REPACK", help="weight repacking")
    no_host: bool = option(
        False, "--no-host", "model", "no-host", "LLAMA_ARG_NO_HOST", llama="no_host", help="bypass the host buffer"
    )
    check_tensors: bool = option(
        False,
        "--check-tensors",
        "model",
        "check-tensors",
        llama="check_tensors",
        help="check the tensors' data for invalid values",
    )
    mlock: bool = option(
        False, "--mlock", "model", "mlock", "LLAMA_ARG_MLOCK", help="older llama.cpp's: --load-mode mmap+mlock"
    )
    mmap: bool = option(True, "--mmap", "model", "mmap", "LLAMA_ARG_MMAP", help="older llama.cpp's --load-mode")
    # --- the server: slots, prompt cache, templates, endpoints, media ---
    n_parallel: int = option(
        -1,
        "--n-parallel -np --parallel",
        "server",
        "parallel",
        "LLAMA_ARG_N_PARALLEL",
        parse=int,
        help="slots decoded together; -1 = auto: 4 slots sharing one KV pool",
    )
    max_prompt_tokens: int = option(
        0, "--max-prompt-tokens", "server", parse=int, help="longer prompts get a 400; 0 = the context size - 1"
    )
    context_shift: bool = option(
        False,
        "--context-shift",
        "server",
        "context-shift",
        "LLAMA_ARG_CONTEXT_SHIFT",
        help="a full context drops old tokens (n_keep kept)",
    )
    spm_infill: bool = option(False, "--spm-infill", "server", "spm-infill", help="/infill prompts suffix first (SPM)")
    cache_ram: int = option(
        8192,
        "--cache-ram -cram",
        "server",
        "cache-ram",
        "LLAMA_ARG_CACHE_RAM",
        parse=int,
        help="RAM prompt cache of slots' KV state, MiB (-1: no limit, 0: off)",
    )
    cache_idle_slots: bool = option(
        True,
        "--cache-idle-slots",
        "server",
        "cache-idle-slots",
        "LLAMA_ARG_CACHE_IDLE_SLOTS",
        help="idle slots go to the prompt cache when a request starts",
    )
    slot_save_path: str | None = option(
        None,
        "--slot-save-path",
        "server",
        "slot-save-path",
        help="directory of POST /slots/{id}?action=save|restore files",
    )
    cache_disk_max: int = option(
        2147483648,
        "--cache-disk-max",
        "server",
        parse=int,
        help="bytes of this model's prompt cache kept on disk across restarts (0: off)",
    )
    log_prompts_dir: str | None = option(
        None,
        "--log-prompts-dir",
        "server",
        "log-prompts-dir",
        help="each completion's prompt to DIR/<ms>.txt (llama-server's)",
    )
    # --- the model: llama_model_params, LoRA adapters ---
    lora: tuple[str, ...] = option((), "--lora", "model", "lora", help="LoRA adapter GGUF (comma-separated: several)")
    lora_scaled: tuple[str, ...] = option(
        (), "--lora-scaled", "model", "lora-scaled", help="LoRA adapter with a scale: FNAME:SCALE,..."
    )
    lora_init_without_apply: bool = option(
        False, "--lora-init-without-apply", "model", "lora-init-without-apply", help="load --lora adapters at scale 0"
    )
    # --- the server: slots, prompt cache, templates, endpoints, media ---
    endpoint_props: bool = option(
        False,
        "--props",
        "server",
        "props",
        "LLAMA_ARG_ENDPOINT_PROPS",
        help="POST /props answers success (llama-server's)",
    )
    endpoint_metrics: bool = option(
        True,
        "--no-metrics",
        "server",
        "metrics",
        "LLAMA_ARG_ENDPOINT_METRICS",
        absent=False,
        help="GET /metrics: 501 (llama-server's)",
    )
    endpoint_slots: bool = option(
        True, "--no-slots", "server", "slots", "LLAMA_ARG_ENDPOINT_SLOTS", help="GET /slots: 501 (llama-server's)"
    )
    chat_format: str | None = option(
        None, "--chat-format", "server", help="llama-cpp-python chat format; default: GGUF template"
    )
    chat_template: str | None = option(
        None,
        "--chat-template",
        "server",
        "chat-template",
        "LLAMA_ARG_CHAT_TEMPLATE",
        help="the Jinja chat template's text (not a built-in name)",
    )
    chat_template_file: str | None = option(
        None,
        "--chat-template-file",
        "server",
        "chat-template-file",
        "LLAMA_ARG_CHAT_TEMPLATE_FILE",
        help="Jinja chat template (default: the GGUF's, else ChatML)",
    )
    jinja: bool = option(
        True,
        "--no-jinja",
        "server",
        "jinja",
        "LLAMA_ARG_JINJA",
        help="llama.cpp's built-in templates (C API) instead of Jinja",
    )
    chat_template_kwargs: str | None = option(
        None,
        "--chat-template-kwargs",
        "server",
        "chat-template-kwargs",
        "LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
        help="JSON object of extra template variables",
    )
    prefill_assistant: bool = option(
        True,
        "--prefill-assistant",
        "server",
        "prefill-assistant",
        "LLAMA_ARG_PREFILL_ASSISTANT",
        help="a chat's last assistant message is continued; --no-prefill-assistant: it is a whole turn",
    )
    reasoning_format: str = option(
        "auto", "--reasoning-format", "server", "reasoning-format", "LLAMA_ARG_THINK", choices=REASONING_FORMATS
    )
    reasoning: str = option(
        "auto",
        "--reasoning -rea",
        "server",
        "reasoning",
        "LLAMA_ARG_REASONING",
        parse=reasoning_mode,
        help="on, off or auto: the chat template's enable_thinking (off: its empty thinking block ends the prompt)",
    )
    verbose: bool = option(
        False,
        "--verbose",
        "server",
        "log-verbose",
        help="OpenAI answers carry __verbose (a request's verbose: its own)",
    )
    video_fps: float = option(
        4.0,
        "--video-fps",
        "server",
        "video-fps",
        "LLAMA_ARG_VIDEO_FPS",
        parse=float,
        help="target video frame rate (<= 0: the video's own)",
    )
    video_timestamp_interval: int = option(
        5000,
        "--video-timestamp-interval",
        "server",
        "video-timestamp-interval",
        "LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL",
        parse=int,
        help="milliseconds between a video's timestamp texts (<= 0: none)",
    )
    video_ffmpeg_dir: str | None = option(
        None,
        "--video-ffmpeg-dir",
        "server",
        "video-ffmpeg-dir",
        "LLAMA_ARG_VIDEO_FFMPEG_DIR",
        help="directory of ffmpeg and ffprobe (default: PATH)",
    )
    # --- every request's sampler defaults ---
    seed: int | None = option(None, "--seed", "sampler", "seed", parse=int)
    sampling: str | None = option(
        None,
        "--sampling-defaults",
        "sampler",
        kind="json",
        help="JSON object of every request's default fields (--temp, -n, ...)",
    )

    @classmethod
    def from_params(cls, params: Params) -> InferenceLaunch:
        """The launch a model's parameters ask for (``model_configured``'s, ``instance_requested``'s):
        a key it does not name is left out (the log keeps it, for the audit trail); a value that does
        not parse leaves the worker's default, as placement always read it."""
        values: dict[str, Any] = {}  # Any: each value parsed by its own row, for its field
        for name, row in ROWS.items():
            value = _from_param(row, params[name]) if name in params else row.absent
            if value is not ABSENT:
                values[name] = value
        return dataclasses.replace(_WORKER_DEFAULTS, **values)

    def to_argv(self) -> list[str]:
        """The worker's flags for every option that is not the worker's default."""
        argv: list[str] = []
        for name, row in ROWS.items():
            value, default = getattr(self, name), DEFAULTS[name]
            if value == default:
                continue
            flag = row.flags[0]
            if row.kind == "list":
                for item in value:
                    argv += [flag, item]
            elif row.kind == "switch" or row.kind == "unswitch":
                argv.append(flag)
            elif row.kind == "both":
                argv.append(flag if value else "--no-" + flag.removeprefix("--"))
            else:
                argv += [flag, str(value)]
        return argv

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The table's flags on ``parser`` (the worker adds its own process flags beside them)."""
        for name, row in ROWS.items():
            default, text = DEFAULTS[name], row.help or None
            if row.kind in ("switch", "unswitch"):
                action = "store_true" if row.kind == "switch" else "store_false"
                parser.add_argument(*row.flags, dest=name, action=action, default=default, help=text)
            elif row.kind == "both":
                boolean = argparse.BooleanOptionalAction
                parser.add_argument(*row.flags, dest=name, action=boolean, default=default, help=text)
            elif row.kind == "list":  # argparse appends to a copy of the default: a list
                parser.add_argument(*row.flags, dest=name, action="append", default=[], help=text)
            else:
                choices = list(row.choices) if row.choices is not None else None
                parser.add_argument(
                    *row.flags, dest=name, type=_argtype(row), choices=choices, default=default, help=text
                )

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> InferenceLaunch:
        """The launch a parse by :meth:`add_arguments` read."""
        values = {name: getattr(ns, name) for name in ROWS}
        for name, row in ROWS.items():
            if row.kind == "list":
                values[name] = tuple(values[name])
        return cls(**values)

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> InferenceLaunch:
        """Inverse of :meth:`to_argv` (argparse's exit 2 for a flag it refuses)."""
        parser = argparse.ArgumentParser(prog="InferenceLaunch")
        cls.add_arguments(parser)
        return cls.from_namespace(parser.parse_args(list(argv)))

    def llama_fields(self, goes: Goes) -> tuple[tuple[str, float], ...]:
        """The llama.cpp struct fields (``llama=`` in the table) of ``goes`` that the options set, with
        llama.cpp's enum numbers for named values; a field left unset keeps llama.cpp's default."""
        fields: list[tuple[str, float]] = []
        for name, row in ROWS.items():
            value = getattr(self, name)
            if row.goes != goes or row.llama is None or value is None or value == DEFAULTS[name]:
                continue
            fields.append((row.llama, row.choices[value] if row.choices is not None else value))
        return tuple(fields)


def _from_param(row: Option, value: JSON) -> object:
    """One parameter's value, as the worker would parse the flag the service wrote for it."""
    if row.kind in ("switch", "unswitch", "both"):
        # A switch is on when truthy; an on-by-default one goes off only at False (None keeps it on).
        return bool(value) if row.kind == "switch" or row.absent is not ABSENT else value is not False
    if value is None:
        return ABSENT
    if row.kind == "list":
        return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else (str(value),)
    if row.kind == "json":
        return json.dumps(value, separators=(",", ":")) if value else ABSENT
    try:
        parsed = row.parse(str(value))
    except ValueError:
        return ABSENT
    return ABSENT if row.choices is not None and parsed not in row.choices else parsed


def _argtype(row: Option) -> Callable[[str], object]:
    """``row.parse`` for argparse: int and float as themselves (argparse's own "invalid int value"),
    a normaliser's ``ValueError`` as its message."""
    if row.parse in (int, float, str):
        return row.parse

    def parse(text: str) -> object:
        try:
            return row.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


ROWS: Mapping[str, Option] = {
    f.name: f.metadata["option"] for f in dataclasses.fields(InferenceLaunch) if "option" in f.metadata
}
"""The option table, by field name (the parameter's name in the log)."""
BY_KEY: Mapping[str, str] = {row.key: name for name, row in ROWS.items() if row.key is not None}
"""Field name by llama-server key (``ctx-size`` -> ``n_ctx``)."""
DEFAULTS: Mapping[str, object] = {f.name: f.default for f in dataclasses.fields(InferenceLaunch)}
"""The worker's default of each option."""
_WORKER_DEFAULTS = InferenceLaunch()
