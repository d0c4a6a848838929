"""``modelrouter usage``: ``GET /usage`` as a table, one row per group and the total last."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from service.console.client import Client, Query
from service.console.format import duration
from service.core.usage import GROUPS

__all__ = ["GROUPS", "usage"]


def _ms(value: float | None) -> str:
    return duration(value / 1000 if value is not None else None)


def _cells(row: Mapping[str, Any]) -> tuple[str, ...]:  # Any: one of GET /usage's rows (JSON)
    return (
        row["group"],
        str(row["requests"]),
        str(row["prompt_tokens"]),
        str(row["completion_tokens"]),
        str(row["errors"]),
        _ms(row["p50_ms"]),
        _ms(row["p95_ms"]),
    )


def usage(client: Client, console: Console, params: Query) -> int:
    """Requests, tokens in and out, errors and p50/p95 duration per group (``--group-by``, default
    ``model``), for the filters given; a key that sees only its own usage gets its own."""
    answer = client.get("/usage", **params)
    group = str(answer["group_by"] or "").upper()
    table = Table(group or "", "REQUESTS", "TOKENS IN", "TOKENS OUT", "ERRORS", "P50", "P95", box=None, pad_edge=False)
    table.columns[0].overflow = "fold"  # a model name is wrapped, never cut
    for row in answer["rows"]:
        table.add_row(*_cells(row))
    if answer["total"]["requests"] == 0:
        console.print("no requests")
        return 0
    table.add_row(*_cells(answer["total"]), style="bold")
    console.print(table)
    return 0
