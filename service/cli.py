"""The ``modelrouter`` command.

``modelrouter serve`` takes llama-server's command line (router options,
per-model defaults, ``-hf``/``-m``) plus modelrouter's own options, so that a
llama.cpp user can swap the binary and change nothing else; see
``docs/llama-cpp-compat.md``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service import __version__
from service.llamacpp.command_line import add_llama_arguments, env_options, given_options, normalize_argv
from service.llamacpp.router_args import UsageError, llama_cache_dir, router_args

if TYPE_CHECKING:
    from service.settings import Settings

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR, "off": logging.CRITICAL + 1}


def serve_settings(args: argparse.Namespace, environ: dict[str, str]) -> tuple[Settings, tuple[str, ...]]:
    """Settings for ``serve`` from its parsed command line and the environment, with
    the warnings to log once logging is set up. Raises ``UsageError``/``ValueError``."""
    from service.settings import Settings  # SQLAlchemy: ~1 s of imports the client commands skip

    cli, keys = given_options(args)
    routed = router_args(cli, keys, env_options(environ), environ)
    overrides = dict(routed.overrides)
    if args.presets is not None and "presets" not in overrides:
        overrides["presets"] = args.presets
    settings = Settings.from_env(
        environ,
        home=args.home,
        database_url=args.database_url,
        hub_cache=args.hub_cache,
        models_memory_margin=args.models_memory_margin,
        hang_timeout=args.hang_timeout,
        cache_disk_max=args.cache_disk_max,
        cache_disk_total=args.cache_disk_total,
        spec_adaptive=args.spec_adaptive,
        node=args.node,
        advertise_url=args.advertise_url,
        llama_cache=llama_cache_dir(environ),
        **overrides,
    )
    return settings, routed.warnings


def _check_presets(settings: Settings) -> None:
    """Fail before serving on a preset llama.cpp would refuse (the file, section and key named)."""
    if settings.presets is None:
        return
    from service.catalogue.sources import check_preset

    check_preset(settings.presets)


def _check_options(settings: Settings) -> None:
    """Fail before serving on a command-line or environment option llama-server would refuse (a bad
    value, an option llama.cpp removed), in its words: ``OptionError``. Presets are read at start-up."""
    from service.llamacpp.options import merge, model_settings

    model_settings(merge([settings.model_env_args, settings.model_args]), {})


def _list_cache(settings: Settings) -> int:
    """``--cache-list``: the cached models, numbered as llama.cpp prints them."""
    from service.catalogue.cache_models import cache_models
    from service.catalogue.sources import scan_caches

    names = sorted(cache_models(scan_caches(settings)[0]))
    print(f"number of models in cache: {len(names)}")
    for number, name in enumerate(names, 1):
        print(f"{number:4d}. {name}")
    return 0


def _list_devices(settings: Settings) -> int:
    """``--list-devices``: llama-server's text, printed by the inference worker's libraries in a child
    process (the service never loads llama.cpp's GPU backends: on CUDA that holds VRAM)."""
    import subprocess

    from service.supervision.node_devices import list_devices_argv

    return subprocess.run(list_devices_argv(as_json=False), env=settings.worker_environment(), check=False).returncode


def _print_and_exit(args: argparse.Namespace, settings: Settings) -> int | None:
    """llama-server's options that print something and exit (``--version``, ``--cache-list``,
    ``--list-devices``): their exit code; None when none was given."""
    if getattr(args, "llama:version", None):
        print(f"modelrouter {__version__}")
        return 0
    if getattr(args, "llama:cache-list", None):
        return _list_cache(settings)
    if getattr(args, "llama:list-devices", None):
        return _list_devices(settings)
    return None


def _serve(args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    try:
        settings, warnings = serve_settings(args, environ)
        exited = _print_and_exit(args, settings)
        if exited is not None:
            return exited
        _check_presets(settings)
        _check_options(settings)
    except ValueError as exc:  # UsageError, PresetError, a bad MODELROUTER_* value
        print(f"modelrouter serve: error: {exc}", file=sys.stderr)
        return 2
    # --offline keeps start-up and -hf resolution off the network (the service decides that itself:
    # Settings.offline), but an explicit POST /models still downloads, as llama.cpp's router does; so
    # huggingface_hub, which reads HF_HUB_OFFLINE once at import and then refuses every request, must
    # not see it. The workers get the environment as it was (Settings.environment).
    if settings.offline:
        os.environ.pop("HF_HUB_OFFLINE", None)
    from service.outside.binding import BindError, listening_sockets

    try:
        sockets = listening_sockets(settings.hosts, settings.port)
    except BindError as exc:
        print(f"modelrouter serve: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # in use, not an address of this machine: llama-server's "couldn't bind"
        print(f"modelrouter serve: error: couldn't bind {settings.host} port {settings.port}: {exc}", file=sys.stderr)
        return 1
    if not _start_logging(settings):
        return 1
    import structlog
    import uvicorn

    from service.app import create_app

    log = structlog.get_logger("modelrouter.cli")
    for warning in warnings:
        log.warning("option_ignored", detail=warning)
    app = create_app(settings)
    # log_config=None: uvicorn's records propagate to our structlog handler.
    config = uvicorn.Config(
        # ws="none": no route is a websocket, and uvicorn's "auto" imports a websocket library (~15 ms).
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        ws="none",
        # h11 writes header names in the case given (httptools lowercases them): service/api/header_case.py
        http="h11",
        ssl_keyfile=str(settings.ssl_keyfile) if settings.ssl_keyfile else None,
        ssl_certfile=str(settings.ssl_certfile) if settings.ssl_certfile else None,
    )
    for sock in sockets:
        log.info("listening", address=_address(sock))
    # What start-up allocated lives as long as the process: collections no longer walk it (main).
    gc.freeze()
    gc.enable()
    uvicorn.Server(config).run(sockets=sockets)
    return 0


def _start_logging(settings: Settings) -> bool:
    """The service's log as llama-server's log flags ask; False (said on stderr) when ``--log-file``
    cannot be opened (a missing directory, no permission)."""
    from service.outside.logging_config import configure_logging

    try:
        configure_logging(
            json=settings.log_json,
            level=LOG_LEVELS[settings.log_level],
            secrets=settings.secrets(),
            file=settings.log_file,
            colors=settings.log_colors,
            prefix=settings.log_prefix,
            timestamps=settings.log_timestamps,
        )
    except OSError as exc:
        print(f"modelrouter serve: error: --log-file {settings.log_file}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def _address(sock: socket.socket) -> str:
    """``host:port`` of a TCP socket, the path of a UNIX one."""
    name = sock.getsockname()
    return name if isinstance(name, str) else f"{name[0]}:{name[1]}"


def _add_serve(sub: argparse._SubParsersAction[Any]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the HTTP service (takes llama-server's command line)",
        description="Serve models as llama.cpp's router does. Takes llama-server's options, then modelrouter's.",
        usage="modelrouter serve [llama-server options] [modelrouter options]",
        add_help=False,  # llama.cpp's -h/--help/--usage is registered with its options
        allow_abbrev=False,  # llama-server matches option names exactly
    )
    add_llama_arguments(serve)
    ours = serve.add_argument_group("modelrouter", "modelrouter's own options (also MODELROUTER_* variables)")
    ours.add_argument("--home", type=Path, help="data dir: database, download cache (MODELROUTER_HOME)")
    ours.add_argument(
        "--database-url",
        help="event log: sqlite:///FILE (default <home>/modelrouter.db) or postgresql://user@host/db "
        "(MODELROUTER_DATABASE_URL)",
    )
    ours.add_argument(
        "--hub-cache",
        type=Path,
        help="download cache, HF layout (MODELROUTER_HUB_CACHE; default LLAMA_CACHE, else <home>/hub)",
    )
    ours.add_argument("--presets", type=Path, help="same as --models-preset (MODELROUTER_PRESETS)")
    ours.add_argument("--node", help="join a cluster as this node (needs a postgresql:// URL; MODELROUTER_NODE)")
    ours.add_argument("--advertise-url", help="this node's API for the other nodes (MODELROUTER_ADVERTISE_URL)")
    ours.add_argument(
        "--models-memory-margin",
        help="memory kept free of models: bytes (2G, 512M) or a share (10%%, the default); a load that "
        "cannot fit even after evicting every unpinned model is refused with 507 (MODELROUTER_MODELS_MEMORY_MARGIN)",
    )
    ours.add_argument(
        "--hang-timeout",
        type=float,
        help="seconds one engine step may last before its worker is given up as hung, killed and its requests "
        "answered 503; a worker silent that long, or 30 s, is too (default 600; 0: never; MODELROUTER_HANG_TIMEOUT)",
    )
    ours.add_argument(
        "--cache-disk-max",
        type=int,
        help="bytes of prompt cache each model's worker saves at a planned unload and restores at its next load, "
        "for every model over its preset's cache-disk-max (default 2 GiB; 0: off; MODELROUTER_CACHE_DISK_MAX)",
    )
    ours.add_argument(
        "--spec-adaptive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --spec-type: a slot whose drafts miss drafts fewer, down to none for a while (default on; "
        "--no-spec-adaptive drafts as llama-server does; MODELROUTER_SPEC_ADAPTIVE)",
    )
    ours.add_argument(
        "--cache-disk-total",
        type=int,
        help="bytes of saved prompt cache across all models; past it the least recently used files are deleted "
        "(default 8 GiB; MODELROUTER_CACHE_DISK_TOTAL)",
    )
    serve.set_defaults(func=_serve)


def build_parser() -> argparse.ArgumentParser:
    from service.console import OneLineParser, add_client_commands

    parser = OneLineParser(
        prog="modelrouter",
        description="Event-sourced local LLM model manager. `serve` runs the service; the other "
        "commands talk to it (MODELROUTER_URL, default http://127.0.0.1:8080).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    add_client_commands(sub)

    from service.recovery import gc
    from service.recovery.verify import add_arguments as verify_arguments
    from service.recovery.verify import run as run_verify

    verify_parser = sub.add_parser("verify", help="check the log, snapshots and downloaded files")
    verify_arguments(verify_parser)
    verify_parser.set_defaults(func=run_verify)
    gc_parser = sub.add_parser("gc", help="delete partial downloads no job refers to")
    gc.add_arguments(gc_parser)
    gc_parser.set_defaults(func=gc.run)
    from service.recovery import migrate_store

    copy_parser = sub.add_parser("migrate-store", help="copy the event log to another database (SQLite -> PostgreSQL)")
    migrate_store.add_arguments(copy_parser)
    copy_parser.set_defaults(func=migrate_store.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    from service.console import CLIENT_COMMANDS, run_client

    if words and words[0] in CLIENT_COMMANDS:
        return run_client(words)  # skips the service's imports (SQLAlchemy, alembic: ~1 s)
    # The imports and the app make ~130k tracked objects that are never garbage; the collector
    # walked them again and again while they were made (~15% of an empty log's start). serve
    # turns it back on, on a frozen heap, before it serves; the other commands at once.
    gc.disable()
    try:
        args = build_parser().parse_args(normalize_argv(words))
        if args.func is not _serve:
            gc.enable()
        return int(args.func(args))
    finally:
        gc.enable()  # also after a refused start, when main runs inside another program


__all__ = ["UsageError", "build_parser", "main", "serve_settings"]

if __name__ == "__main__":
    sys.exit(main())
