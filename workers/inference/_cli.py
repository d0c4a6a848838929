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
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from service.core.launch import InferenceLaunch
from service.core.launch_rows import LOAD_MODES
from workers.inference.http import FrontOptions
from workers.inference.llama import LoraError, parse_specs

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_LOAD_FAILED, EXIT_ORPHANED = 0, 1, 2, 3, 4
AUTO_SLOTS = 4  # -np -1 (auto, the default): llama-server's n_parallel, with kv_unified
STATS_INTERVAL_S = 5.0  # instance_stats: at most this often, and only when it changed


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerArgs(InferenceLaunch):
    """The worker's command line: the launch's options, resolved (``-np`` auto, ``--reranking``,
    ``--rope-scale``, the thread counts), and how this process runs and reports."""

    model_path: str
    model_name: str
    instance_id: str
    alias: str = ""  # the name answers carry (llama-server's --alias; default: model_name)
    threads: int  # --n-threads, default every core the worker may use
    threads_batch: int  # --n-threads-batch, default --n-threads
    host: str = "127.0.0.1"
    port: int = 0
    engine: str = "batch"
    mmproj: str | None = None
    lora_specs: tuple[tuple[str, float], ...] = ()
    stop_timeout: float = 5.0
    stats_interval: float = STATS_INTERVAL_S
    db: str | None = None
    database_url: str | None = None
    events: str | None = None
    log_level: str = "info"
    parent_pid: int | None = None
    log_path: str | None = None
    prompt_cache_dir: str | None = None  # the model's saved prompt cache (issue 35); None: not kept
    model_sha256: str | None = None  # the model file's; None: hashed after the load when needed

    @property
    def ubatch_size(self) -> int:
        """``-ub``, by llama-server's name."""
        return self.n_ubatch


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workers.inference", description=__doc__.split("\n")[0])
    p.add_argument("--model-path", required=True)
    p.add_argument("--model-name", default=None, help="the model's name in the event log (default: file stem)")
    p.add_argument("--alias", default=None, help="the id its answers carry, as llama-server's (default: --model-name)")
    p.add_argument("--instance-id", default=None, help="default: NAME-PID")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = pick a free port (reported in events)")
    p.add_argument("--engine", choices=["batch", "legacy"], default="batch", help="legacy: llama_cpp.Llama, 1 slot")
    InferenceLaunch.add_arguments(p)
    # llama-server's shorthands, resolved into the launch's own options by parse_args
    p.add_argument("--reranking", "--rerank", action="store_true", help="serve /rerank (--embedding --pooling rank)")
    p.add_argument("--rope-scale", type=float, default=None, help="expand the context N times (rope-freq-scale 1/N)")
    p.add_argument("--mmproj", default=None, help="the model's multimodal projector: chats may carry images")
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
    p.add_argument("--prompt-cache-dir", default=None, help="save the prompt cache here at a planned stop, restore it")
    p.add_argument("--model-sha256", default=None, help="the model file's sha256 (default: hashed after the load)")
    return p


_PROCESS = ("host", "port", "engine", "mmproj", "stop_timeout", "stats_interval", "db", "database_url", "events")
_PROCESS_TOO = ("log_level", "parent_pid", "log_path", "prompt_cache_dir", "model_sha256")


def parse_args(argv: list[str] | None = None) -> WorkerArgs:
    """The worker's command line; argparse's exit 2 for one it refuses."""
    p = _parser()
    ns = p.parse_args(argv)
    launch = _resolved(InferenceLaunch.from_namespace(ns), ns)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = launch.n_threads or cores
    model_name = ns.model_name or Path(ns.model_path).stem
    return WorkerArgs(
        **{f.name: getattr(launch, f.name) for f in dataclasses.fields(launch)},
        **{name: getattr(ns, name) for name in _PROCESS + _PROCESS_TOO},
        model_path=ns.model_path,
        model_name=model_name,
        alias=ns.alias or model_name,
        instance_id=ns.instance_id or f"{model_name}-{os.getpid()}",
        threads=threads,
        threads_batch=launch.n_threads_batch or threads,
        lora_specs=_lora_specs(p, launch),
    )


def _resolved(launch: InferenceLaunch, ns: argparse.Namespace) -> InferenceLaunch:
    """llama-server's shorthands and automatic values, as the options they stand for."""
    if launch.n_parallel < 0:  # llama-server's auto: 4 slots, and any of them may fill the whole context
        launch = dataclasses.replace(launch, n_parallel=AUTO_SLOTS, kv_unified=True)
    if ns.reranking:  # as llama-server's --reranking
        launch = dataclasses.replace(launch, embedding=True, pooling="rank")
    if ns.rope_scale and launch.rope_freq_scale is None:  # an explicit --rope-freq-scale wins
        launch = dataclasses.replace(launch, rope_freq_scale=1.0 / ns.rope_scale)
    return launch


def model_fields(launch: InferenceLaunch) -> tuple[tuple[str, int], ...]:
    """The ``llama_model_params`` fields the options set (the others: llama.cpp's defaults)."""
    fields = {name: int(value) for name, value in launch.llama_fields("model")}
    legacy = ("mlock" if launch.mlock else "none") if not launch.mmap else ("mmap+mlock" if launch.mlock else None)
    if "load_mode" not in fields and legacy is not None:  # --load-mode replaced --mlock and --no-mmap
        fields = {"load_mode": LOAD_MODES[legacy], **fields}
    if not launch.repack:
        fields["use_extra_bufts"] = False
    return tuple(fields.items())


def rope_fields(launch: InferenceLaunch) -> tuple[tuple[str, float], ...]:
    """The ``llama_context_params`` RoPE and YaRN fields the options set (the others: the model's)."""
    return launch.llama_fields("context")


def _lora_specs(p: argparse.ArgumentParser, launch: InferenceLaunch) -> tuple[tuple[str, float], ...]:
    """``--lora``/``--lora-scaled`` as ``[(path, scale)]``; ``--lora-init-without-apply``: all at 0."""
    try:
        specs = parse_specs(list(launch.lora), list(launch.lora_scaled))
    except LoraError as exc:
        p.error(str(exc))
    return tuple((path, 0.0) for path, _ in specs) if launch.lora_init_without_apply else tuple(specs)


def predict_route(environ: Mapping[str, str]) -> str | None:
    """llama-server's Vertex AI route: ``AIP_PREDICT_ROUTE`` (default ``/predict``) with ``AIP_MODE=PREDICTION``."""
    if environ.get("AIP_MODE") != "PREDICTION":
        return None
    route = environ.get("AIP_PREDICT_ROUTE") or "/predict"
    route = route if route.startswith("/") else "/" + route
    return route[3:] if route.startswith("/v1/") else route  # routed as the handler strips /v1


def front_options(args: WorkerArgs, environ: Mapping[str, str]) -> FrontOptions:
    """What the HTTP front reads of the command line (and of the environment: the Vertex AI route)."""
    return FrontOptions(
        chat_format=args.chat_format,
        default_seed=args.seed,
        max_prompt_tokens=args.max_prompt_tokens,
        spm_infill=args.spm_infill,
        slot_save_path=args.slot_save_path,
        endpoint_props=args.endpoint_props,
        predict_route=predict_route(environ),
        log_prompts_dir=args.log_prompts_dir,
        endpoint_metrics=args.endpoint_metrics,
        endpoint_slots=args.endpoint_slots,
        chat_template=args.chat_template,
        chat_template_file=args.chat_template_file,
        jinja=args.jinja,
        chat_template_kwargs=args.chat_template_kwargs,
        prefill_assistant=args.prefill_assistant,
        reasoning_format=args.reasoning_format,
        reasoning=args.reasoning,
        mmproj=args.mmproj,
        verbose=args.verbose,
        spec_type=args.spec_type,
    )
