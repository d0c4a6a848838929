"""Docs stay true: every event type is catalogued, and the README shows the two commands."""

from __future__ import annotations

from pathlib import Path

from service.core.events import EVENT_TYPES

ROOT = Path(__file__).resolve().parents[1]


def test_every_event_type_is_in_the_catalogue_with_its_version() -> None:
    catalogue = (ROOT / "docs" / "event-catalogue.md").read_text()
    for type_, cls in EVENT_TYPES.items():
        row = next((line for line in catalogue.splitlines() if line.startswith(f"| `{type_}` |")), None)
        assert row is not None, f"{type_} is missing from docs/event-catalogue.md"
        assert row.split("|")[2].strip() == str(cls.VERSION), f"{type_}: catalogue version differs from code"


def test_readme_names_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
