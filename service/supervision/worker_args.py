"""Command lines for the worker processes (one place that knows their flags)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from service.core.contracts import DownloadSpec
from service.core.launch import InferenceLaunch, Params
from service.core.prompt_cache import DIR_NAME, model_dir_name
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


def prompt_cache_root(settings: Settings) -> Path:
    """Where every model's saved prompt cache lies (issue 35): ``<home>/prompt-cache``."""
    return settings.home / DIR_NAME


def prompt_cache_dir(settings: Settings, model: str) -> Path:
    """``model``'s own prompt-cache directory, made here so the worker only writes into it."""
    where = prompt_cache_root(settings) / model_dir_name(model)
    where.mkdir(parents=True, exist_ok=True)
    return where


def inference_argv(
    settings: Settings,
    model: str,
    path: str,
    instance_id: str,
    port: int,
    launch: InferenceLaunch | Params,
    mmproj: str | None = None,
    alias: str | None = None,
    model_sha256: str | None = None,
) -> list[str]:
    """``python -m workers.inference`` for one instance: its ``launch`` (or the parameters of a model
    or an ``instance_requested``, whose unknown keys the launch leaves out) as the worker's flags;
    ``alias``: the name its answers carry when not ``model`` (single-model mode's ``--alias``)."""
    if not isinstance(launch, InferenceLaunch):
        launch = InferenceLaunch.from_params(launch)
    if settings.cache_disk_max is not None:  # serve --cache-disk-max: every model, over its preset
        launch = dataclasses.replace(launch, cache_disk_max=settings.cache_disk_max)
    if settings.spec_adaptive is not None:  # serve --[no-]spec-adaptive: every model, over its preset
        launch = dataclasses.replace(launch, spec_adaptive=settings.spec_adaptive)
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
        "--prompt-cache-dir",
        str(prompt_cache_dir(settings, model)),
        *(["--model-sha256", model_sha256] if model_sha256 else []),
    ]
    argv += launch.to_argv()
    if mmproj is not None:
        argv += ["--mmproj", mmproj]
    if alias is not None and alias != model:
        argv += ["--alias", alias]
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
