"""``modelrouter verify``'s ``prompt_cache`` check: the saved files on disk against the log. A real
SQLite log, real files, the real command (``service.recovery.verify.main``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.core import events as ev
from service.core.prompt_cache import DIR_NAME, file_path
from service.event_store.codec import NewEvent
from service.recovery.verify import main
from tests.recovery.histories import write_history


def _saved(file: str, size: int) -> ev.PromptCacheSaved:
    return ev.PromptCacheSaved(
        instance_id="i1", file=file, tokens=size, bytes=size, prefix_sha256="p" * 64, model_sha256="m" * 64
    )


@pytest.fixture
def home(db_path: Path) -> Path:
    """A data dir whose log knows ``m``'s ``kept.bin`` (100 bytes) and ``gone.bin`` (discarded since)."""
    home = db_path.parent
    events = [
        NewEvent(ev.ModelDiscovered(source="models_dir", path="/m/m.gguf", files=(), size=1), "m"),
        NewEvent(_saved("kept.bin", 100), "m"),
        NewEvent(_saved("gone.bin", 50), "m"),
        NewEvent(ev.PromptCacheDiscarded(file="gone.bin", reason="budget", bytes=50), "m"),
    ]
    write_history(db_path, events).close()
    return home


def _kept(home: Path) -> Path:
    return Path(file_path(home / DIR_NAME, "m", "kept.bin"))


def _check(home: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    code = main(["--home", str(home), "--json"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    return code, next(c for c in checks if c["name"] == "prompt_cache")


def test_the_files_the_log_knows_are_there_with_their_size(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _kept(home).parent.mkdir(parents=True)
    _kept(home).write_bytes(b"k" * 100)
    code, check = _check(home, capsys)
    assert (code, check["status"], check["items"]) == (0, "OK", [])
    assert "1 saved file(s), 100 bytes" in str(check["detail"])


def test_a_missing_or_resized_file_fails(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, check = _check(home, capsys)
    assert code == 1 and check["status"] == "FAIL" and "kept.bin" in str(check["items"]) and "missing" in str(check)
    _kept(home).parent.mkdir(parents=True)
    _kept(home).write_bytes(b"k" * 99)
    code, check = _check(home, capsys)
    assert code == 1 and "has 99 bytes, expected 100" in str(check["items"])


def test_unknown_files_and_cut_saves_are_listed_without_failing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _kept(home).parent.mkdir(parents=True)
    _kept(home).write_bytes(b"k" * 100)
    (_kept(home).parent / "gone.bin").write_bytes(b"g")  # discarded in the log, still on disk
    (_kept(home).parent / "next.bin.tmp-4242").write_bytes(b"t")
    code, check = _check(home, capsys)
    assert code == 0 and check["status"] == "WARN"
    items = "\n".join(map(str, check["items"]))  # type: ignore[call-overload]
    assert "gone.bin: not in the log" in items and "next.bin.tmp-4242: left by a save cut off" in items
