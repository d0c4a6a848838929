"""The ``modelrouter`` client commands (pull, ls, ps, run, history, events...),
talking to a running service over HTTP. See ``docs/cli.md``."""

from __future__ import annotations

from service.console.client import Client, CliError
from service.console.commands import add_client_commands

__all__ = ["CliError", "Client", "add_client_commands"]
