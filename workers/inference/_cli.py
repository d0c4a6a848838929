"""Inference worker: one OS process per loaded model (``python -m workers.inference``).

Why a process per model: a llama.cpp crash, leak or OOM kill takes down only
that model, and unloading is just ending the process -- the kernel frees
everything. The service spawns us, learns about us only from the events we
append (``instance_loading`` -> ``loading_progress``* -> ``instance_ready`` |
``instance_load_failed``; finally ``instance_stopped``: the classes of those
names in ``service/core/events.py``, emitted through the worker runtime, :mod:`workers.runtime`)
and proxies OpenAI requests to our HTTP port.

Order at start: die-with-parent hooks, bind the port (so ``/health`` answers
``loading`` at once), emit ``instance_loading``, load on the inference
thread, emit ``instance_ready``.

Engines: ``batch`` (default; :mod:`workers.inference.engine._batch`: ``--n-parallel``
slots with continuous batching over llama.cpp's C API) or ``legacy``
(:mod:`workers.inference.engine._legacy`: ``llama_cpp.Llama``, one request at a
time). ``--embedding`` always uses ``legacy``, whose high-level path pools
embeddings.

Stdin protocol (only watched when stdin is a pipe or socket):
  ``stop [reason]\\n``  graceful stop, ``instance_stopped.reason`` = reason
                        (default "requested"), exit 0.
  EOF                   the service died: stop at once, record nothing (the service's
                        recovery records ``instance_lost``), exit 4.
Signals: SIGTERM/SIGINT = graceful stop (reason from an earlier ``stop`` line,
else "signal"); a second one cancels the running request immediately.
PR_SET_PDEATHSIG delivers SIGTERM when the parent dies (treated like EOF).

Exit codes: 0 stopped on request; 1 internal error; 2 bad command line;
3 load failed (``instance_load_failed`` emitted); 4 orphaned (parent died).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

from workers.inference.llama import CACHE_TYPES, LAZY_MODES, LOAD_MODES, ROPE_SCALING, LoraError, parse_specs

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_LOAD_FAILED, EXIT_ORPHANED = 0, 1, 2, 3, 4
AUTO_SLOTS = 4  # -np -1 (auto, the default): llama-server's n_parallel, with kv_unified
_SLOTS_HELP = "slots decoded together (batch engine); -1 = auto: 4 slots sharing one KV pool, as llama-server"
STATS_INTERVAL_S = 5.0  # instance_stats: at most this often, and only when it changed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    p = argparse.ArgumentParser(prog="python -m workers.inference", description=__doc__.split("\n")[0])
    p.add_argument("--model-path", required=True)
    p.add_argument("--model-name", default=None, help="id served in /v1/models (default: file stem)")
    p.add_argument("--instance-id", default=None, help="default: NAME-PID")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = pick a free port (reported in events)")
    p.add_argument(
        "--n-ctx",
        "-c",
        "--ctx-size",
        type=int,
        default=4096,
        help="the whole context, n_ctx / n_parallel per slot (capped to the training context); 0 = training context",
    )
    p.add_argument("--n-threads", type=int, default=cores)
    p.add_argument("--n-threads-batch", type=int, default=None, help="default: --n-threads")
    p.add_argument("--n-batch", "-b", "--batch-size", type=int, default=512)
    p.add_argument("--n-parallel", "-np", "--parallel", type=int, default=-1, help=_SLOTS_HELP)
    p.add_argument("--engine", choices=["batch", "legacy"], default="batch", help="legacy: llama_cpp.Llama, 1 slot")
    p.add_argument(
        "--max-prompt-tokens", type=int, default=0, help="longer prompts get a 400; 0 = the context size - 1"
    )
    p.add_argument("--embedding", "--embeddings", action="store_true", help="serve /embedding and /v1/embeddings")
    p.add_argument(
        "--pooling",
        choices=["none", "mean", "cls", "last", "rank"],
        default=None,
        help="pooling of embeddings (default: the model's)",
    )
    p.add_argument("--reranking", "--rerank", action="store_true", help="serve /rerank (--embedding --pooling rank)")
    p.add_argument("--context-shift", action="store_true", help="a full context drops old tokens (n_keep kept)")
    p.add_argument("--spm-infill", action="store_true", help="/infill prompts suffix first (SPM)")
    p.add_argument("--lora", action="append", default=[], help="LoRA adapter GGUF (comma-separated: several)")
    p.add_argument("--lora-scaled", action="append", default=[], help="LoRA adapter with a scale: FNAME:SCALE,...")
    p.add_argument("--lora-init-without-apply", action="store_true", help="load --lora adapters at scale 0")
    p.add_argument("--props", action="store_true", help="POST /props answers success (llama-server's)")
    _kv_cache_args(p)
    _context_args(p)
    _model_args(p)
    _template_args(p)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-metrics", dest="metrics", action="store_false", help="GET /metrics: 501 (llama-server's)")
    p.add_argument("--no-slots", dest="slots", action="store_false", help="GET /slots: 501 (llama-server's)")
    p.add_argument("--stop-timeout", type=float, default=5.0, help="grace for the running request on stop (s)")
    p.add_argument(
        "--stats-interval",
        type=float,
        default=STATS_INTERVAL_S,
        help="instance_stats at most this often, when changed (s; 0 = never)",
    )
    p.add_argument("--db", default=None, help="SQLite event store to append events to")
    p.add_argument("--database-url", default=None, help="PostgreSQL event store (postgresql://...), instead of --db")
    p.add_argument("--events", default=None, help="JSONL event file ('-' = stdout, the default without --db)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--parent-pid", type=int, default=None, help="exit at once if our parent is not this pid")
    p.add_argument("--log-path", default=None, help="where the service keeps this worker's lines (for instance_ready)")
    args = p.parse_args(argv)
    args.lora_specs = _lora_specs(p, args)
    args.model_name = args.model_name or Path(args.model_path).stem
    args.instance_id = args.instance_id or f"{args.model_name}-{os.getpid()}"
    args.n_threads_batch = args.n_threads_batch or args.n_threads
    if args.n_parallel < 0:  # llama-server's auto: 4 slots, and any of them may fill the whole context
        args.n_parallel, args.kv_unified = AUTO_SLOTS, True
    if args.reranking:  # as llama-server's --reranking
        args.embedding, args.pooling = True, "rank"
    return args


def _kv_cache_args(p: argparse.ArgumentParser) -> None:
    """Where slots' KV cells live, and where they go when a slot is idle (llama-server's names)."""
    p.add_argument("--kv-unified", action="store_true", help="one KV pool for all slots (each may use all of -c)")
    p.add_argument(
        "--cache-ram",
        "-cram",
        type=int,
        default=8192,
        help="RAM prompt cache of slots' KV state, MiB (-1: no limit, 0: off), as llama-server",
    )
    p.add_argument(
        "--cache-idle-slots",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="idle slots go to the prompt cache when a request starts (cleared from a KV pool)",
    )
    p.add_argument("--slot-save-path", default=None, help="directory of POST /slots/{id}?action=save|restore files")
    p.add_argument("--log-prompts-dir", default=None, help="each completion's prompt to DIR/<ms>.txt (llama-server's)")


def _flash_attn(value: str) -> str:
    """llama-server's ``-fa`` value: on, off or auto (its truthy and falsey words too)."""
    word = value.strip().lower()
    if word in ("on", "enabled", "true", "1"):
        return "on"
    if word in ("off", "disabled", "false", "0"):
        return "off"
    if word == "auto":
        return "auto"
    raise argparse.ArgumentTypeError(f"unknown value for --flash-attn: '{value}'")


def _context_args(p: argparse.ArgumentParser) -> None:
    """The context's own options (batch engine), as llama-server names them; unset: llama.cpp's defaults."""
    p.add_argument("--ubatch-size", "-ub", type=int, default=512, help="physical maximum batch size")
    p.add_argument("--flash-attn", "-fa", type=_flash_attn, default="auto", help="on, off or auto (llama.cpp's)")
    for flag, short, part in (("--cache-type-k", "-ctk", "K"), ("--cache-type-v", "-ctv", "V")):
        p.add_argument(flag, short, choices=list(CACHE_TYPES), default="f16", help=f"KV cache data type for {part}")
    p.add_argument("--swa-full", action="store_true", help="full-size cache for sliding-window layers")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True, help="an empty run before ready")
    p.add_argument("--rope-scaling", choices=list(ROPE_SCALING), default=None, help="RoPE frequency scaling method")
    p.add_argument("--rope-scale", type=float, default=None, help="expand the context N times (rope-freq-scale 1/N)")
    for name in (
        "rope-freq-base",
        "rope-freq-scale",
        "yarn-ext-factor",
        "yarn-attn-factor",
        "yarn-beta-slow",
        "yarn-beta-fast",
    ):
        p.add_argument(f"--{name}", type=float, default=None, help="as llama-server (default: the model's)")
    p.add_argument("--yarn-orig-ctx", type=int, default=None, help="YaRN: original context size of the model")


def _model_args(p: argparse.ArgumentParser) -> None:
    """How the weights load (batch engine), as llama-server names it; unset: llama.cpp's defaults."""
    p.add_argument("--load-mode", "-lm", choices=list(LOAD_MODES), default=None, help="mmap, mlock, ... (auto)")
    p.add_argument("--lazy-mode", "-lzm", choices=list(LAZY_MODES), default=None, help="tensors read on demand")
    p.add_argument("--repack", action=argparse.BooleanOptionalAction, default=True, help="weight repacking")
    p.add_argument("--no-host", action="store_true", help="bypass the host buffer")
    p.add_argument("--check-tensors", action="store_true", help="check the tensors' data for invalid values")
    p.add_argument("--mlock", action="store_true", help="older llama.cpp's: --load-mode mmap+mlock")
    p.add_argument("--mmap", action=argparse.BooleanOptionalAction, default=True, help="older llama.cpp's --load-mode")


def model_fields(args: argparse.Namespace) -> tuple[tuple[str, int], ...]:
    """The ``llama_model_params`` fields the options set (the others: llama.cpp's defaults)."""
    fields: dict[str, int] = {}
    legacy = ("mlock" if args.mlock else "none") if not args.mmap else ("mmap+mlock" if args.mlock else None)
    mode = args.load_mode or legacy  # --load-mode replaced --mlock and --no-mmap
    if mode is not None:
        fields["load_mode"] = LOAD_MODES[mode]
    if args.lazy_mode is not None:
        fields["lazy_mode"] = LAZY_MODES[args.lazy_mode]
    if not args.repack:
        fields["use_extra_bufts"] = False
    if args.no_host:
        fields["no_host"] = True
    if args.check_tensors:
        fields["check_tensors"] = True
    return tuple(fields.items())


def rope_fields(args: argparse.Namespace) -> tuple[tuple[str, float], ...]:
    """The ``llama_context_params`` RoPE and YaRN fields the options set (the others: the model's)."""
    fields: dict[str, float] = {}
    if args.rope_scaling is not None:
        fields["rope_scaling_type"] = ROPE_SCALING[args.rope_scaling]
    if args.rope_scale:
        fields["rope_freq_scale"] = 1.0 / args.rope_scale
    for name in (
        "rope_freq_base",
        "rope_freq_scale",
        "yarn_ext_factor",
        "yarn_attn_factor",
        "yarn_beta_slow",
        "yarn_beta_fast",
        "yarn_orig_ctx",
    ):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return tuple(fields.items())


def _template_args(p: argparse.ArgumentParser) -> None:
    """The chat template's options, as llama-server names them."""
    p.add_argument("--chat-format", default=None, help="llama-cpp-python chat format; default: GGUF template")
    p.add_argument("--chat-template", default=None, help="the Jinja chat template's text (not a built-in name)")
    p.add_argument("--chat-template-file", default=None, help="Jinja chat template (default: the GGUF's, else ChatML)")
    p.add_argument(
        "--no-jinja", dest="jinja", action="store_false", help="llama.cpp's built-in templates (C API) instead of Jinja"
    )
    p.add_argument("--chat-template-kwargs", default=None, help="JSON object of extra template variables")
    p.add_argument("--reasoning-format", default="auto", choices=["none", "auto", "deepseek", "deepseek-legacy"])
    p.add_argument(
        "--sampling-defaults",
        default=None,
        help="JSON object of request fields every request defaults to (llama-server's --temp, -n, ...)",
    )
    p.add_argument("--mmproj", default=None, help="the model's multimodal projector: chats may carry images")
    # llama-server's video options (common_params' defaults); videos are read by ffprobe and ffmpeg
    p.add_argument("--video-fps", type=float, default=4.0, help="target video frame rate (<= 0: the video's own)")
    p.add_argument(
        "--video-timestamp-interval",
        type=int,
        default=5000,
        help="milliseconds between a video's timestamp texts (<= 0: none)",
    )
    p.add_argument("--video-ffmpeg-dir", default=None, help="directory of ffmpeg and ffprobe (default: PATH)")


def _lora_specs(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[tuple[str, float]]:
    """``--lora``/``--lora-scaled`` as ``[(path, scale)]``; ``--lora-init-without-apply``: all at 0."""
    try:
        specs = parse_specs(args.lora, args.lora_scaled)
    except LoraError as exc:
        p.error(str(exc))
    return [(path, 0.0) for path, _ in specs] if args.lora_init_without_apply else specs


def predict_route(environ: Mapping[str, str]) -> str | None:
    """llama-server's Vertex AI route: ``AIP_PREDICT_ROUTE`` (default ``/predict``) with ``AIP_MODE=PREDICTION``."""
    if environ.get("AIP_MODE") != "PREDICTION":
        return None
    route = environ.get("AIP_PREDICT_ROUTE") or "/predict"
    route = route if route.startswith("/") else "/" + route
    return route[3:] if route.startswith("/v1/") else route  # routed as the handler strips /v1
