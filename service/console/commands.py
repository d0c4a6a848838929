"""The client subcommands of ``modelrouter``: argument parsing and dispatch.

Each command talks to a running service (``MODELROUTER_URL``); every failure
is one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeAlias

from rich.console import Console

import service.console.chat as chat
import service.console.control as control
import service.console.keys as keys
import service.console.logs as logs
import service.console.pull as pull
import service.console.tables as tables
import service.console.usage as usage
from service.console.client import Client, CliError, Query

_ENV = "environment: MODELROUTER_URL (default http://127.0.0.1:8080), MODELROUTER_API_KEY (sent as a bearer token)"
Sub: TypeAlias = "argparse._SubParsersAction[Any]"  # of modelrouter's own parser class


def _command(sub: Sub, name: str, help_text: str, examples: str, run: Callable[..., int]) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_text,
        description=help_text[0].upper() + help_text[1:] + ".",
        epilog=f"examples:\n{examples}\n\n{_ENV}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=lambda args: _run(run, args))
    return parser


def _run(run: Callable[..., int], args: argparse.Namespace) -> int:
    client = Client.from_env(os.environ)
    try:
        return run(client, Console(highlight=False), args)
    finally:
        client.close()


def _load(client: Client, console: Console, args: argparse.Namespace) -> int:
    model = chat.load(client, console, args.model, wait=not args.no_wait)
    if args.no_wait:
        console.print(f"{model}: loading (see `modelrouter ps`)")
    return 0


def _events_params(args: argparse.Namespace) -> Query:
    return {
        "model": args.model,
        "type": args.type or None,
        "since": args.since,
        "until": args.until,
        "after": args.after,
        "before": args.before,
        "limit": args.limit,
    }


CLIENT_COMMANDS = (
    "pull",
    "ls",
    "ps",
    "load",
    "unload",
    "rm",
    "cancel",
    "run",
    "history",
    "logs",
    "events",
    "nodes",
    "keys",
    "usage",
)


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (and exit 2), naming ``--help`` instead of printing the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def run_client(argv: Sequence[str]) -> int:
    """Parse and run one client command; a :class:`CliError` is one line on stderr."""
    parser = OneLineParser(prog="modelrouter")
    add_client_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"modelrouter {args.command}: error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130  # Ctrl-C where a command has nothing to clean up


def add_client_commands(sub: Sub) -> None:
    """Register the client commands, in the order ``--help`` lists them."""
    _add_pull_command(sub)
    _add_listing_commands(sub)
    _add_model_commands(sub)
    _add_run_command(sub)
    _add_log_commands(sub)
    keys.add_keys_command(sub, _command)


def _add_pull_command(sub: Sub) -> None:
    p = _command(
        sub,
        "pull",
        "download a model from the Hub, with a progress bar per file",
        "  modelrouter pull ggml-org/gemma-3-270m-GGUF:Q4_K_M\n"
        "  modelrouter pull bartowski/Qwen2.5-0.5B-Instruct-GGUF      # the default quant\n"
        "  Ctrl-C cancels and keeps the partial file; pull again to resume",
        lambda c, con, a: pull.pull(c, con, a.model),
    )
    p.add_argument("model", metavar="REPO[:QUANT]", help="user/repo[:QUANT][@revision]")


def _add_listing_commands(sub: Sub) -> None:
    """ls, ps and nodes: tables of what the service holds and runs."""
    _command(
        sub,
        "ls",
        "list downloaded and discovered models (size, quant, architecture, status)",
        "  modelrouter ls",
        lambda c, con, a: tables.ls(c, con),
    )
    _command(
        sub,
        "ps",
        "list running models (pid, uptime, memory, requests in flight, last used)",
        "  modelrouter ps",
        lambda c, con, a: tables.ps(c, con),
    )
    _command(
        sub,
        "nodes",
        "list the nodes (state, memory, what each runs and holds, devices; without --node: this service)",
        "  modelrouter nodes",
        lambda c, con, a: tables.nodes(c, con),
    )


def _add_model_commands(sub: Sub) -> None:
    """load, unload, rm and cancel: the commands that change a model or its download."""
    p = _command(
        sub,
        "load",
        "load a model and wait until it is ready",
        "  modelrouter load ggml-org/gemma-3-270m-GGUF\n  modelrouter load my-alias --no-wait",
        _load,
    )
    p.add_argument("model", metavar="MODEL", help="name, alias or user/repo")
    p.add_argument("--no-wait", action="store_true", help="return once the load has started")

    p = _command(
        sub,
        "unload",
        "stop a model's worker (or cancel its download)",
        "  modelrouter unload ggml-org/gemma-3-270m-GGUF",
        lambda c, con, a: control.unload(c, con, a.model),
    )
    p.add_argument("model", metavar="MODEL")

    p = _command(
        sub,
        "rm",
        "delete a downloaded model's files",
        "  modelrouter rm ggml-org/gemma-3-270m-GGUF:Q4_K_M\n"
        "  modelrouter rm ggml-org/gemma-3-270m-GGUF --force   # unload it first",
        lambda c, con, a: control.rm(c, con, a.model, force=a.force),
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--force", action="store_true", help="unload a loaded model first")

    p = _command(
        sub,
        "cancel",
        "cancel a running download (the partial is kept for resume)",
        "  modelrouter cancel ggml-org/gemma-3-270m-GGUF:Q4_K_M\n  modelrouter cancel job-3f2a --discard",
        lambda c, con, a: control.cancel(c, con, a.target, discard=a.discard),
    )
    p.add_argument("target", metavar="MODEL|JOB_ID")
    p.add_argument("--discard", action="store_true", help="delete the partial file too")


def _add_run_command(sub: Sub) -> None:
    p = _command(
        sub,
        "run",
        "chat with a model (loads it first); with PROMPT, answer once and exit",
        "  modelrouter run ggml-org/gemma-3-270m-GGUF\n"
        '  modelrouter run ggml-org/gemma-3-270m-GGUF "Why is the sky blue?"\n'
        "  echo 'Summarise: ...' | modelrouter run my-model -",
        lambda c, con, a: chat.run(c, con, a.model, a.prompt, dict(vars(a))),
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("prompt", metavar="PROMPT", nargs="?", help="answer this once and exit ('-' reads stdin)")
    p.add_argument("--system", help="a system message")
    p.add_argument("--max-tokens", type=int, default=512, help="longest answer in tokens (default 512)")
    p.add_argument("--temperature", type=float, help="sampling temperature")
    p.add_argument("--seed", type=int, help="sampling seed")
    p.add_argument("--stop", action="append", help="stop the answer at this text (repeatable)")


def _add_log_commands(sub: Sub) -> None:
    """history, logs and events: the commands that read a model's timeline, a worker's log or the event log."""
    p = _command(
        sub,
        "history",
        "a model's timeline: every download and every load, and how each ended",
        "  modelrouter history ggml-org/gemma-3-270m-GGUF\n  modelrouter history my-alias --json",
        lambda c, con, a: tables.history(c, con, a.model, as_json=a.json),
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--json", action="store_true", help="the raw JSON of GET /models/{id}/history")

    p = _command(
        sub,
        "logs",
        "the end of a worker's log: a model's instance (the latest by default) or a download",
        "  modelrouter logs ggml-org/gemma-3-270m-GGUF\n"
        "  modelrouter logs my-alias --instance i-3f2a --tail 500\n"
        "  modelrouter logs my-model -f          # keep printing new lines\n"
        "  modelrouter logs --job job-3f2a",
        lambda c, con, a: logs.logs(c, a.model, instance=a.instance, job=a.job, tail=a.tail, follow=a.follow),
    )
    p.add_argument("model", metavar="MODEL", nargs="?", help="name, alias or user/repo")
    p.add_argument("--instance", help="one of the model's instances (see `modelrouter history`)")
    p.add_argument("--job", help="a download job's log instead of a model's")
    p.add_argument("--tail", type=int, default=100, help="the last N lines, 1..10000 (default 100)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines as the worker writes them")

    p = _command(
        sub,
        "events",
        "read the event log (the filters of GET /events)",
        "  modelrouter events --model ggml-org/gemma-3-270m-GGUF:Q4_K_M\n"
        "  modelrouter events --type 'download_*' --since 2026-01-01T00:00:00Z\n"
        "  modelrouter events --follow --json | jq .type",
        lambda c, con, a: tables.events(c, con, _events_params(a), follow=a.follow, as_json=a.json),
    )
    p.add_argument("--model", help="one model's events")
    p.add_argument("--type", action="append", help="an event type; repeatable; a trailing * is a prefix")
    p.add_argument("--since", help="ISO-8601 time")
    p.add_argument("--until", help="ISO-8601 time")
    p.add_argument("--after", type=int, help="events after this position")
    p.add_argument("--before", type=int, help="events before this position")
    p.add_argument("--limit", type=int, default=100, help="page size, 1..1000 (default 100)")
    p.add_argument("--follow", "-f", action="store_true", help="stream new events as they happen")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    _add_usage_command(sub)


def _add_usage_command(sub: Sub) -> None:
    p = _command(
        sub,
        "usage",
        "requests, tokens in and out, errors and p50/p95 duration per key, model, day or hour (GET /usage)",
        "  modelrouter usage                          # per model, everything in the log\n"
        "  modelrouter usage --group-by key --since 24h\n"
        "  modelrouter usage --model my-model --group-by day --since 2026-01-01",
        lambda c, con, a: usage.usage(
            c,
            con,
            {"key": a.key, "model": a.model, "since": a.since, "until": a.until, "group_by": a.group_by},
        ),
    )
    p.add_argument("--key", help="one key's requests (a key without admin sees only its own)")
    p.add_argument("--model", help="one model's requests (name or alias)")
    p.add_argument("--since", help="ISO-8601 time, or a duration ago: 30m, 24h, 7d")
    p.add_argument("--until", help="ISO-8601 time, or a duration ago")
    p.add_argument("--group-by", choices=usage.GROUPS, default="model", help="rows per key, model, day or hour")
