"""The ``modelrouter`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from service.logging_config import configure_logging
from service.settings import Settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api import create_app

    settings = Settings.from_env(
        home=args.home,
        host=args.host,
        port=args.port,
        database_url=args.database_url,
        models_max=args.models_max,
        models_dir=args.models_dir,
        hub_cache=args.hub_cache,
        presets=args.presets,
    )
    configure_logging(json=settings.log_json, secrets=settings.secrets())
    app = create_app(settings)
    # log_config=None: uvicorn's records propagate to our structlog handler.
    uvicorn.run(app, host=settings.host, port=settings.port, log_config=None, access_log=False, lifespan="on")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelrouter", description="Event-sourced local LLM model manager")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--home", type=Path, help="data dir (MODELROUTER_HOME)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="bind port (default 8080)")
    serve.add_argument("--database-url", help="sqlite URL (default <home>/modelrouter.db)")
    serve.add_argument("--models-max", type=int, help="loaded models at once (0 = unlimited)")
    serve.add_argument("--models-dir", type=Path, help="directory of local GGUF files (MODELROUTER_MODELS_DIR)")
    serve.add_argument("--hub-cache", type=Path, help="HF cache for downloads (default <home>/hub)")
    serve.add_argument("--presets", type=Path, help="INI file of per-model settings (MODELROUTER_PRESETS)")
    serve.set_defaults(func=_serve)

    from service.recovery import gc
    from service.recovery.verify import add_arguments as verify_arguments
    from service.recovery.verify import run as run_verify

    verify_parser = sub.add_parser("verify", help="check the log, snapshots and downloaded files")
    verify_arguments(verify_parser)
    verify_parser.set_defaults(func=run_verify)
    gc_parser = sub.add_parser("gc", help="delete partial downloads no job refers to")
    gc.add_arguments(gc_parser)
    gc_parser.set_defaults(func=gc.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
