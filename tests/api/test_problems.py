"""Every code the service raises as ``CommandRejected`` has its HTTP status, and no status is kept for a dead code."""

from __future__ import annotations

import ast
from pathlib import Path

from service.api.problems import _STATUS_BY_CODE

SERVICE = Path(__file__).resolve().parents[2] / "service"


def _rejected_codes() -> set[str]:
    codes: set[str] = set()
    for path in SERVICE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "CommandRejected":
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                    f"{path.relative_to(SERVICE.parent)}:{node.lineno}: CommandRejected code must be a string literal"
                )
                codes.add(first.value)
    return codes


def test_status_table_holds_exactly_the_codes_raised_as_command_rejected() -> None:
    assert set(_STATUS_BY_CODE) == _rejected_codes()
