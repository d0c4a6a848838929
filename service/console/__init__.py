"""The ``modelrouter`` client commands (pull, ls, ps, run, history, events...),
talking to a running service over HTTP. See ``docs/cli.md``."""

from __future__ import annotations

from service.console.client import Client, CliError
from service.console.commands import CLIENT_COMMANDS, OneLineParser, add_client_commands, run_client

__all__ = ["CLIENT_COMMANDS", "CliError", "Client", "OneLineParser", "add_client_commands", "run_client"]
