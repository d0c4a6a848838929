"""Docs stay true: the event catalogue describes every event type field by field, and
the README shows the two commands."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from service.core import events as ev
from workers.runtime import DOWNLOAD_WORKER, INFERENCE_WORKER

ROOT = Path(__file__).resolve().parents[1]
_ITEM = re.compile(
    r"^(?P<name>[a-z_][a-z0-9_]*)(?:\[[^\]]*\])?(?:=(?P<default>\"[^\"]*\"|[^\s(]+))?(?: \((?P<note>.+)\))?$"
)


def _rows() -> dict[str, list[str]]:
    """Catalogue table rows by event type: the cells, split on unescaped ``|``."""
    rows = {}
    for line in (ROOT / "docs" / "event-catalogue.md").read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0].strip("`")] = cells
    return rows


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in text:
        depth += char in "[({"
        depth -= char in "])}"
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    return [*items, current.strip()]


def _documented_fields(cell: str) -> list[tuple[str, str | None]]:
    """``(name, default JSON or None)`` per field of a data cell like `` `job_id, discard=false` ``."""
    out = []
    for item in _split_top_level(cell.strip("`")):
        match = _ITEM.match(item)
        assert match, f"cannot read field {item!r} (see the notation at the top of the catalogue)"
        out.append((match["name"], match["default"]))
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _default(field: dataclasses.Field[Any]) -> Any:
    return field.default_factory() if field.default is dataclasses.MISSING else field.default  # type: ignore[misc]  # one of the two is set


@functools.cache
def _constructed_by_the_service() -> set[str]:
    """Event types whose class the service's code (``service/``) instantiates: what the router writes."""
    classes = {cls.__name__: cls.TYPE for cls in ev.EVENT_TYPES.values()}
    found = set()
    for path in (ROOT / "service").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in classes:
                    found.add(classes[name])
    return found


def test_every_event_type_is_in_the_catalogue_with_its_version() -> None:
    rows = _rows()
    for type_, cls in ev.EVENT_TYPES.items():
        assert type_ in rows, f"{type_} is missing from docs/event-catalogue.md"
        assert rows[type_][1] == str(cls.VERSION), f"{type_}: catalogue version differs from code"
    assert set(rows) == set(ev.EVENT_TYPES), f"catalogued but not in the code: {set(rows) - set(ev.EVENT_TYPES)}"


@pytest.mark.parametrize("type_", sorted(ev.EVENT_TYPES))
def test_the_catalogue_lists_every_field_in_order_with_its_default(type_: str) -> None:
    cls = ev.EVENT_TYPES[type_]
    documented = _documented_fields(_rows()[type_][3])
    fields = dataclasses.fields(cls)
    assert [name for name, _ in documented] == [f.name for f in fields], f"{type_}: fields differ from the class"
    required = set(ev.required_fields(cls))
    for (name, default), field in zip(documented, fields, strict=True):
        if name in required:
            assert default is None, f"{type_}.{name} is required: write it without '='"
        else:
            assert default is not None, f"{type_}.{name} has a default: write it as {name}=<JSON>"
            assert json.loads(default) == _jsonable(_default(field)), f"{type_}.{name}: documented default differs"


@pytest.mark.parametrize("type_", sorted(ev.EVENT_TYPES))
def test_the_catalogue_names_every_writer(type_: str) -> None:
    writer = _rows()[type_][2]
    cls = ev.EVENT_TYPES[type_]
    assert ("download worker" in writer) == (cls in DOWNLOAD_WORKER.events), f"{type_}: download worker?"
    assert ("inference worker" in writer) == (cls in INFERENCE_WORKER.events), f"{type_}: inference worker?"
    by_service = "router" in writer or "modelrouter gc" in writer
    assert by_service == (type_ in _constructed_by_the_service()), f"{type_}: does the service write it?"


def test_readme_names_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_security_doc_names_real_settings() -> None:
    """Every ``MODELROUTER_*`` variable the threat model cites is one the service reads (or the one it sets
    for its workers: their secret)."""
    cited = set(re.findall(r"MODELROUTER_[A-Z_]+", (ROOT / "docs" / "security.md").read_text()))
    readers = (ROOT / "service" / "settings.py", ROOT / "service" / "core" / "worker_key.py")
    known = {name for path in readers for name in re.findall(r"MODELROUTER_[A-Z_]+", path.read_text())}
    assert cited and cited <= known, sorted(cited - known)


def test_operations_doc_names_real_settings_and_metrics() -> None:
    """docs/operations.md cites only variables the service reads (or the build and the GPU check read),
    and lists every series ``service/api/metrics.py`` defines."""
    text = (ROOT / "docs" / "operations.md").read_text()
    cited = set(re.findall(r"MODELROUTER_[A-Z_]+", text))
    readers = ("service/settings.py", "devtools/llama_backend.py", "devtools/llama_build.py", "tests/gpu/conftest.py")
    known = {v for path in readers for v in re.findall(r"MODELROUTER_[A-Z_]+", (ROOT / path).read_text())}
    assert cited and cited <= known, sorted(cited - known)
    defined = set(re.findall(r'f"\{_PREFIX\}_([a-z_]+)"', (ROOT / "service" / "api" / "metrics.py").read_text()))
    defined |= set(re.findall(r'_gauge\(\s*"([a-z_]+)"', (ROOT / "service" / "api" / "metrics.py").read_text()))
    documented = set(re.findall(r"`modelrouter_([a-z_]+)", text))
    # Counters are exposed with a ``_total`` suffix.
    assert len(defined) > 15 and defined <= {d.removesuffix("_total") for d in documented}, sorted(
        defined - {d.removesuffix("_total") for d in documented}
    )
