"""House rule: service/core imports only the standard library (and itself)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "service" / "core"
FORBIDDEN_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("time", "time"), ("uuid", "uuid4")}


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules_import_only_stdlib_and_service() -> None:
    allowed = set(sys.stdlib_module_names) | {"service", "__future__"}
    for path in CORE.glob("*.py"):
        bad = _imports(ast.parse(path.read_text())) - allowed
        assert not bad, f"{path.name} imports {bad}"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("service."):
                assert node.module.startswith("service.core"), f"{path.name} imports {node.module}"


def test_core_reads_no_clock_and_makes_no_ids() -> None:
    for path in CORE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name):
                    assert (owner.id, node.func.attr) not in FORBIDDEN_CALLS, (
                        f"{path.name} calls {owner.id}.{node.func.attr}"
                    )
