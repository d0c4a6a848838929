"""The tests mirror the layout (docs/architecture.md, "Tests mirror the layout"): each module of
``service/supervision`` has its own ``tests/supervision/test_<module>.py``, and the packages named
below have a test folder of their own. A new module comes with its test module."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIRRORED = ("supervision",)
"""Packages of ``service`` with one test module per module."""
PENDING: dict[str, str] = {}
"""Modules whose test module is on its way, with why; an entry whose test module exists must go."""
TEST_FOLDERS = ("cluster", "catalogue", "llamacpp", "supervision", "core", "event_store", "recovery", "downloads")
"""Packages of ``service`` whose tests have a folder of their own."""


def _modules(package: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "service" / package).glob("*.py") if p.stem != "__init__")


def test_each_mirrored_module_has_its_test_module() -> None:
    missing = [
        f"service/{package}/{module}.py: no tests/{package}/test_{module}.py"
        for package in MIRRORED
        for module in _modules(package)
        if not (ROOT / "tests" / package / f"test_{module}.py").exists() and f"{package}/{module}" not in PENDING
    ]
    assert not missing, "\n".join(missing)


def test_every_pending_entry_is_still_needed() -> None:
    arrived = [name for name in PENDING if (ROOT / "tests" / f"{name.replace('/', '/test_')}.py").exists()]
    assert not arrived, f"these have their test module now: remove them from PENDING: {arrived}"


def test_these_packages_have_a_test_folder() -> None:
    missing = [name for name in TEST_FOLDERS if not (ROOT / "tests" / name / "__init__.py").is_file()]
    assert not missing, f"no tests/<package>/__init__.py for {missing}"
