"""Command lines for the worker processes (one place that knows their flags)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from service.core.contracts import DownloadSpec
from service.event_store.urls import without_password
from service.settings import Settings
from service.supervision.log_files import log_path


def store_argv(settings: Settings) -> list[str]:
    """Where a worker appends: ``--db PATH`` for the SQLite file, ``--database-url URL`` for
    PostgreSQL -- without its password, since a command line is visible to every user."""
    if settings.postgres:
        return ["--database-url", without_password(settings.database_url)[0]]
    return ["--db", str(settings.db_path)]


def store_env(settings: Settings) -> dict[str, str]:
    """The PostgreSQL URL's password, if any, as ``PGPASSWORD`` (libpq reads it)."""
    password = without_password(settings.database_url)[1] if settings.postgres else None
    return {"PGPASSWORD": password} if password else {}


# Per-model parameters (from presets / model_configured) -> inference worker flags.
_INFERENCE_FLAGS: Mapping[str, str] = {
    "n_ctx": "--n-ctx",
    "n_threads": "--n-threads",
    "n_threads_batch": "--n-threads-batch",
    "n_batch": "--n-batch",
    "n_parallel": "--n-parallel",
    "max_prompt_tokens": "--max-prompt-tokens",
    "chat_format": "--chat-format",
    "chat_template": "--chat-template",
    "chat_template_file": "--chat-template-file",
    "chat_template_kwargs": "--chat-template-kwargs",
    "reasoning_format": "--reasoning-format",
    "seed": "--seed",
    "pooling": "--pooling",
    "slot_save_path": "--slot-save-path",
    "log_prompts_dir": "--log-prompts-dir",
    "cache_ram": "--cache-ram",
    "n_ubatch": "--ubatch-size",
    "flash_attn": "--flash-attn",
    "cache_type_k": "--cache-type-k",
    "cache_type_v": "--cache-type-v",
    "rope_scaling": "--rope-scaling",
    "rope_freq_base": "--rope-freq-base",
    "rope_freq_scale": "--rope-freq-scale",
    "yarn_orig_ctx": "--yarn-orig-ctx",
    "yarn_ext_factor": "--yarn-ext-factor",
    "yarn_attn_factor": "--yarn-attn-factor",
    "yarn_beta_slow": "--yarn-beta-slow",
    "yarn_beta_fast": "--yarn-beta-fast",
    "load_mode": "--load-mode",
    "lazy_mode": "--lazy-mode",
    "lora": "--lora",
    "lora_scaled": "--lora-scaled",
    "video_fps": "--video-fps",
    "video_timestamp_interval": "--video-timestamp-interval",
    "video_ffmpeg_dir": "--video-ffmpeg-dir",
}
_INFERENCE_SWITCHES = {
    "embedding": "--embedding",
    "kv_unified": "--kv-unified",
    "context_shift": "--context-shift",
    "swa_full": "--swa-full",
    "no_host": "--no-host",
    "check_tensors": "--check-tensors",
    "mlock": "--mlock",
    "spm_infill": "--spm-infill",
    "endpoint_props": "--props",
    "lora_init_without_apply": "--lora-init-without-apply",
}


def inference_argv(
    settings: Settings,
    model: str,
    path: str,
    instance_id: str,
    port: int,
    params: Mapping[str, Any],
    mmproj: str | None = None,
) -> list[str]:
    """``python -m workers.inference`` for one instance; unknown params are ignored
    (they are recorded in the event for the audit trail all the same)."""
    argv = [
        sys.executable,
        "-m",
        "workers.inference",
        "--model-path",
        path,
        "--model-name",
        model,
        "--instance-id",
        instance_id,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *store_argv(settings),
        "--parent-pid",
        str(settings.service_pid),
        "--log-path",
        str(log_path(settings.home, "instance", instance_id)),
    ]
    for key, flag in _INFERENCE_FLAGS.items():
        if params.get(key) is not None:
            argv += [flag, str(params[key])]
    argv += [flag for key, flag in _INFERENCE_SWITCHES.items() if params.get(key)]
    # llama-server's endpoint switches: /metrics off unless --metrics, /slots on unless --no-slots.
    if not params.get("endpoint_metrics"):
        argv.append("--no-metrics")
    if params.get("endpoint_slots") is False:
        argv.append("--no-slots")
    for key in ("jinja", "cache_idle_slots", "warmup", "repack", "mmap"):  # on unless turned off, as in llama-server
        if params.get(key) is False:
            argv.append("--no-" + key.replace("_", "-"))
    if mmproj is not None:
        argv += ["--mmproj", mmproj]
    if params.get("sampling"):  # llama-server's sampling options: every request's defaults
        argv += ["--sampling-defaults", json.dumps(params["sampling"], separators=(",", ":"))]
    return argv


def download_argv(settings: Settings, job_id: str, model: str, spec: DownloadSpec) -> list[str]:
    """``python -m workers.download`` for one job (``spec``: what the service resolved on the Hub)."""
    return [
        sys.executable,
        "-m",
        "workers.download",
        "--job-id",
        job_id,
        "--model",
        model,
        "--cache-dir",
        str(settings.cache_dir),
        "--spec",
        spec.to_argv(),
        *store_argv(settings),
        "--stall-timeout",
        str(settings.stall_timeout),
        "--parent-pid",
        str(settings.service_pid),
        "--stdin-control",
    ]
