"""``modelrouter keys add|list|revoke``: named API keys (issue 34) through ``/keys``.

``add`` prints the secret once (the service keeps only its salted digest); the commands need a
full key in ``MODELROUTER_API_KEY``, as the routes do.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from service.console.client import Client, CliError

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
Command = Callable[..., argparse.ArgumentParser]


def seconds(text: str) -> float | None:
    """``90``, ``90s``, ``15m``, ``12h``, ``30d``, ``2w`` as seconds; None if ``text`` is not one."""
    found = _DURATION.fullmatch(text.strip())
    return float(found[1]) * _UNIT[found[2]] if found else None


def key_body(args: argparse.Namespace) -> dict[str, Any]:
    """``POST /keys``'s body from ``keys add``'s options (``--expires``: a duration or ISO 8601)."""
    # The wire body of POST /keys, built member by member; the service decodes it into KeyCreate.
    body: dict[str, Any] = {"name": args.name, "priority": args.priority}
    body["models"] = [p for group in args.models or [] for p in group.split(",") if p]
    body["endpoints"] = [e for group in args.endpoints or ["inference"] for e in group.split(",") if e]
    for name in ("rpm", "tpm"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    if args.max_keep_alive is not None:
        keep = seconds(args.max_keep_alive)
        if keep is None:
            raise CliError(f"--max-keep-alive: not a duration: {args.max_keep_alive!r} (e.g. 300, 5m, 1h)", code=2)
        body["max_keep_alive"] = keep
    if args.expires is not None:
        span = seconds(args.expires)
        body["expires_in" if span is not None else "expires_at"] = span if span is not None else args.expires
    return body


def add(client: Client, console: Console, args: argparse.Namespace) -> int:
    issued = client.post("/keys", key_body(args))
    console.print(f"key {issued['key']['name']!r} created; its secret, shown this once:")
    print(issued["secret"])  # plain, on its own line: copied or piped as is
    return 0


def _limit(value: object) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def listing(client: Client, console: Console) -> int:
    keys = client.get("/keys")["keys"]
    columns = ("NAME", "PREFIX", "MODELS", "ENDPOINTS", "RPM", "TPM", "KEEP-ALIVE", "EXPIRES")
    table = Table(*columns, box=None, pad_edge=False)
    for key in keys:
        expires = key["expires_at"] or "never"
        table.add_row(
            key["name"],
            key["prefix"],
            ", ".join(key["models"]) or "*",
            ", ".join(key["endpoints"]),
            _limit(key["rpm"]),
            _limit(key["tpm"]),
            _limit(key["max_keep_alive"]),
            f"{expires} (expired)" if key["expired"] else expires,
        )
    console.print(table if keys else "no named keys (add one with `modelrouter keys add NAME`)")
    return 0


def revoke(client: Client, console: Console, name: str) -> int:
    client.request("DELETE", f"/keys/{name}")
    console.print(f"key {name!r} revoked")
    return 0


def add_keys_command(sub: Any, command: Command) -> None:
    """``keys`` and its three actions (``command``: the client commands' parser factory)."""
    keys = sub.add_parser("keys", help="named API keys: add (prints the secret once), list, revoke")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = command(
        actions,
        "add",
        "add a named key with a scope; prints its secret once",
        "  modelrouter keys add chat-ui --models 'team/*' --rpm 60\n"
        "  modelrouter keys add ops --endpoints inference,admin --expires 30d",
        add,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--models", action="append", help="glob patterns over model names and aliases (comma-separated)")
    p.add_argument("--endpoints", action="append", help="inference and/or admin (default: inference)")
    p.add_argument("--rpm", type=int, help="requests per minute")
    p.add_argument("--tpm", type=int, help="tokens (prompt + completion) per minute")
    p.add_argument("--max-keep-alive", help="the cap on a client's keep_alive/ttl (300, 5m, 1h)")
    p.add_argument("--expires", help="a duration from now (30d, 12h) or an ISO 8601 time")
    p.add_argument("--priority", type=int, default=0, help="higher is served first when requests wait")
    command(actions, "list", "list the named keys and their scopes", "  modelrouter keys list", _list)
    p = command(actions, "revoke", "revoke a named key on every node", "  modelrouter keys revoke chat-ui", _revoke)
    p.add_argument("name", metavar="NAME")


def _list(client: Client, console: Console, args: argparse.Namespace) -> int:
    return listing(client, console)


def _revoke(client: Client, console: Console, args: argparse.Namespace) -> int:
    return revoke(client, console, args.name)
