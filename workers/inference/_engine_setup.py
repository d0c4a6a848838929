"""Which engine an inference worker runs, and how it loads: decided once from the command line.

``batch`` (default): :class:`~workers.inference.engine.BatchEngine`, ``--n-parallel``
slots over llama.cpp's C API, loaded by :func:`~workers.inference.llama.load_llama`.
``legacy``: :class:`~workers.inference.engine.LegacyEngine` around ``llama_cpp.Llama``,
one request at a time. ``--embedding`` runs on either: the batch engine pools
embeddings in its own context (``--pooling``, the model's by default).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path

from service.core.event_base import Event
from service.core.fit import FitPlan
from service.core.launch_devices import SPLIT_MODES
from workers.inference._cli import WorkerArgs, model_fields, rope_fields
from workers.inference._offload_setup import cpu_build_warnings, fit_plan, fitted_n_ctx, offload_of, placement
from workers.inference.engine import BatchEngine, Engine, FinishedLog, LegacyEngine, PromptDisk
from workers.inference.llama import (
    CACHE_TYPES,
    FLASH_ATTN,
    POOLING,
    ContextConfig,
    LegacyOptions,
    LlamaLog,
    LlamaModel,
    Loaded,
    LoadedLlama,
    LoadedModel,
    LoadError,
    Projector,
    VideoOptions,
    complete_import,
    load_llama,
    load_model,
)


def build_engine(
    args: WorkerArgs,
    *,
    on_finished: FinishedLog | None = None,
    on_debug: Callable[[str], None] | None = None,
    on_event: Callable[[Event], None] | None = None,
    log: Callable[..., None] | None = None,
) -> Engine:
    """The engine ``args`` ask for; ``on_finished`` logs each finished request (either engine),
    ``on_debug`` the batch engine's prompt-cache lines; ``on_event`` and ``log``: the disk prompt
    cache's events and lines (``--prompt-cache-dir``, batch engine only)."""
    engine: BatchEngine | LegacyEngine
    if args.engine == "legacy":
        engine = LegacyEngine(args.model_name, embedding=bool(args.embedding))
    else:
        engine = BatchEngine(
            args.model_name,
            n_parallel=args.n_parallel,
            embedding=bool(args.embedding),
            context_shift=args.context_shift,
            cache_ram_mib=args.cache_ram,
            cache_idle_slots=args.cache_idle_slots,
            speculative=args,
        )
        engine.on_debug = on_debug
        if args.prompt_cache_dir and on_event is not None and log is not None:
            engine.disk = PromptDisk(
                directory=Path(args.prompt_cache_dir),
                max_bytes=max(0, args.cache_disk_max),
                instance_id=args.instance_id,
                model_path=args.model_path,
                model_sha256=args.model_sha256,
                lora_specs=args.lora_specs,
                emit=on_event,
                log=log,
            )
    engine.on_finished = on_finished
    return engine


def load_projector(
    path: str,
    llm: LlamaModel,
    log: LlamaLog,
    n_threads: int,
    video: VideoOptions | None = None,
    *,
    use_gpu: bool = True,
) -> Projector:
    """``--mmproj``: the projector on the model's weights; one that does not load fails the worker's
    load (llama-server refuses to start too), with libmtmd's own words. ``video``: how its videos
    are read (``--video-*``); ``use_gpu``: ``--mmproj-offload``."""
    log.install_mtmd()
    log.mark()
    try:
        return Projector(path, llm.model, n_threads=n_threads, n_batch=llm.n_batch, video=video, use_gpu=use_gpu)
    except RuntimeError as exc:
        why = "; ".join(log.errors()[-3:])
        raise LoadError("load_error", f"{exc}: {why}" if why else str(exc)) from None


def context_config(args: WorkerArgs, plan: FitPlan | None = None) -> ContextConfig:
    """The batch engine's context, from the worker's command line (and ``--fit``'s ``plan``)."""
    plan = plan or FitPlan()
    return ContextConfig(
        fitted_n_ctx(args, plan),
        args.n_parallel,
        args.n_batch,
        args.threads,
        args.threads_batch,
        warmup=args.warmup,
        embedding=bool(args.embedding),
        pooling=POOLING.get(args.pooling or "", -1),
        kv_unified=args.kv_unified,
        n_ubatch=args.n_ubatch,
        flash_attn=FLASH_ATTN[args.flash_attn],
        type_k=CACHE_TYPES[args.cache_type_k],
        type_v=CACHE_TYPES[args.cache_type_v],
        swa_full=args.swa_full,
        rope=rope_fields(args),
        model=model_fields(args),
        placement=placement(args, plan),
    )


def load(args: WorkerArgs, log: LlamaLog, on_progress: Callable[[float], bool]) -> Loaded:
    """Load the model the way the chosen engine needs it (on the thread that will own it), where
    the offload flags and ``--fit`` put it; ``offload`` and ``used`` say where it went."""
    from workers.inference.llama import supports_gpu_offload

    if not supports_gpu_offload():
        for line in cpu_build_warnings(args):  # llama-server's, once, before the load
            log.warn(line)
    plan = fit_plan(args, args.model_path)
    log.record(True)  # the load log: its offload and buffer lines say where the model went
    try:
        loaded = _load(args, log, on_progress, plan)
    finally:
        log.record(False)
    where = placement(args, plan)
    offload = offload_of(args, where, plan, log.recorded(), loaded.n_layer)
    return dataclasses.replace(loaded, offload=offload)


def _load(
    args: WorkerArgs, log: LlamaLog, on_progress: Callable[[float], bool], plan: FitPlan
) -> LoadedLlama | LoadedModel:
    if args.engine == "batch":
        # numpy, jinja2 and the chat formats (~0.3 s of CPU) load while llama.cpp loads the model.
        threading.Thread(target=complete_import, name="chat-import", daemon=True).start()
        loaded = load_llama(args.model_path, context_config(args, plan), log=log, on_progress=on_progress)
        llm = loaded.llm
        llm.lora.load(
            llm.lc, llm.model, llm.ctx, list(args.lora_specs)
        )  # a bad adapter fails the load, as llama-server
        if args.mmproj:
            t0 = time.monotonic()
            video = VideoOptions(args.video_fps, args.video_timestamp_interval, args.video_ffmpeg_dir or None)
            llm.projector = load_projector(
                args.mmproj, llm, log, args.threads_batch, video, use_gpu=args.mmproj_offload
            )
            loaded.used["mmproj_use_gpu"] = llm.projector.use_gpu
            loaded.phases["projector_ms"] = round((time.monotonic() - t0) * 1000.0, 3)  # logged with instance_ready
        return loaded
    legacy = LegacyOptions(
        fitted_n_ctx(args, plan),
        args.threads,
        args.threads_batch,
        args.n_batch,
        args.embedding,
        args.chat_format,
        args.seed,
        placement=placement(args, plan),
        split_mode=SPLIT_MODES[args.split_mode],
        main_gpu=args.main_gpu,
        offload_kqv=args.kv_offload,
        op_offload=args.op_offload,
    )
    return load_model(args.model_path, legacy, log=log, on_progress=on_progress)
