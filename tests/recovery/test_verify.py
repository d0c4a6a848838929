"""``modelrouter verify`` passes a sound data dir and names each kind of damage."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from service.core.fold import replay
from service.core.snapshot import FOLD_VERSION
from service.core.state import RouterState
from service.event_store.snapshots import save_snapshot_file
from service.event_store.statements import EventFilter
from service.recovery.verify import VerifyReport, main, verify
from tests.recovery.histories import history, publish_files, write_history


def _status(report: VerifyReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def _items(report: VerifyReport, name: str) -> str:
    return "\n".join(next(c for c in report.checks if c.name == name).items)


@pytest.fixture
def blobs(tmp_path: Path) -> Path:
    path = tmp_path / "hub" / "blobs"
    publish_files(path)
    return path


@pytest.fixture
def log(db_path: Path, blobs: Path) -> Path:
    write_history(db_path, history(blobs)).close()
    return db_path


def _insert_raw(db_path: Path, *, position: int | None, type_: str = "router_started", data: str = "{}") -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO events (position, event_id, type, schema_version, model, data, source, recorded_at) "
            "VALUES (?, ?, ?, 1, NULL, ?, '{}', '2026-11-29T15:00:00.000000Z')",
            (position, f"raw-{position}-{type_}", type_, data),
        )


def _snapshot(db_path: Path, state: RouterState, fold_version: int = FOLD_VERSION) -> None:
    save_snapshot_file(db_path, state, fold_version)


def _state_at(db_path: Path, position: int) -> RouterState:
    store = write_history(db_path, [])
    try:
        return replay(store.read(EventFilter(before=position + 1, limit=100_000)))
    finally:
        store.close()


def test_clean_log_passes_every_check_deep(log: Path) -> None:
    _snapshot(log, _state_at(log, 30))
    report = verify(log, deep=True)
    assert report.ok and report.exit_code == 0, report.render()
    assert set(_status(report).values()) == {"OK"}
    assert list(_status(report)) == ["integrity", "append_only", "positions", "parse", "fold", "snapshots", "files"]
    text = report.render()
    assert "1 file(s) of 1 downloaded model(s)" in text and "1 hashed" in text
    assert text.splitlines()[-1] == "all checks passed"


def test_empty_database_passes(db_path: Path) -> None:
    report = verify(db_path, deep=False)
    assert report.ok, report.render()


def test_gap_in_positions_fails(log: Path) -> None:
    head = write_history(log, []).head()
    _insert_raw(log, position=head + 3)  # positions head+1, head+2 never existed
    report = verify(log, deep=False)
    assert _status(report)["positions"] == "FAIL"
    assert f"missing {head + 1}..{head + 2} (2)" in _items(report, "positions")
    assert report.exit_code == 1


def test_deleted_newest_event_is_a_gap(log: Path) -> None:
    head = write_history(log, []).head()
    with sqlite3.connect(log) as conn:
        conn.execute("DROP TRIGGER events_no_delete")
        conn.execute("DELETE FROM events WHERE position = ?", (head,))
    report = verify(log, deep=False)
    assert _status(report)["positions"] == "FAIL"
    assert f"missing {head}" in _items(report, "positions")
    assert _status(report)["append_only"] == "FAIL"


def test_unknown_event_type_fails_parse_but_the_rest_is_checked(log: Path) -> None:
    _insert_raw(log, position=None, type_="event_from_the_future")
    _insert_raw(log, position=None, type_="download_progress", data='{"job_id": "x"')  # truncated JSON
    report = verify(log, deep=False)
    status = _status(report)
    assert status["parse"] == "FAIL" and status["positions"] == "OK" and status["files"] == "OK"
    assert "event_from_the_future" in _items(report, "parse")
    assert "JSONDecodeError" in _items(report, "parse")


def test_missing_file_fails(log: Path, blobs: Path) -> None:
    (blobs / "blob").unlink()  # the snapshot symlink now dangles too
    report = verify(log, deep=False)
    assert _status(report)["files"] == "FAIL"
    assert "is missing" in _items(report, "files")


def test_wrong_size_fails(log: Path, blobs: Path) -> None:
    (blobs / "blob").write_bytes(b"hello, world")
    report = verify(log, deep=False)
    assert _status(report)["files"] == "FAIL"
    assert "has 12 bytes, expected 5" in _items(report, "files")


def test_wrong_sha256_fails_only_with_deep(log: Path, blobs: Path) -> None:
    (blobs / "blob").write_bytes(b"HELLO")  # same size, other bytes
    assert verify(log, deep=False).ok
    deep = verify(log, deep=True)
    assert _status(deep)["files"] == "FAIL"
    assert "has sha256" in _items(deep, "files")


def test_files_without_recorded_paths_are_skipped_with_a_note(db_path: Path) -> None:
    write_history(db_path, history(None)).close()
    report = verify(db_path, deep=True)
    assert report.ok, report.render()
    assert "no blob_path/snapshot_path recorded, skipped" in _items(report, "files")


def test_snapshot_that_differs_from_replay_fails(log: Path) -> None:
    _snapshot(log, RouterState(position=20))  # the fold at 20 is not the empty state
    report = verify(log, deep=False)
    assert _status(report)["snapshots"] == "FAIL"
    assert "differs from replay" in _items(report, "snapshots")


def test_damaged_snapshot_fails_and_old_version_is_only_noted(log: Path) -> None:
    _snapshot(log, RouterState(position=20), fold_version=FOLD_VERSION - 1)
    report = verify(log, deep=False)
    assert _status(report)["snapshots"] == "OK"
    assert "ignored at startup" in _items(report, "snapshots")
    with sqlite3.connect(log) as conn:
        conn.execute(
            "INSERT INTO snapshots (position, fold_version, state, created_at) VALUES (3, ?, '{oops', 'x')",
            (FOLD_VERSION,),
        )
    assert _status(verify(log, deep=False))["snapshots"] == "FAIL"


def test_main_exit_codes_and_json(log: Path, blobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", str(log), "--deep"]) == 0
    assert "all checks passed" in capsys.readouterr().out
    (blobs / "blob").write_bytes(b"HELLO")
    assert main(["--db", str(log), "--deep", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert {c["name"]: c["status"] for c in report["checks"]}["files"] == "FAIL"
    assert main(["--db", str(log.parent / "absent.db")]) == 2


def test_main_finds_the_database_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODELROUTER_DATABASE_URL", raising=False)
    home = tmp_path / "home"
    from service.recovery.migrate import upgrade

    upgrade(home / "modelrouter.db")
    assert main(["--home", str(home)]) == 0


def test_verify_while_the_log_grows_sees_one_consistent_state(log: Path) -> None:
    """verify runs in one read transaction: appends and snapshots made meanwhile
    (the service keeps running) cause no false gaps or 'beyond head' snapshots."""
    import threading

    from service.core import events as ev
    from service.event_store.codec import NewEvent

    store = write_history(log, history(progress=2000))
    stop = threading.Event()

    def keep_writing() -> None:
        while not stop.is_set():
            store.append(
                [NewEvent(ev.RouterStarted(pid=1, version="0.1", host="127.0.0.1", port=8080)) for _ in range(20)]
            )
            _snapshot(log, _state_at(log, store.head()))

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        for _ in range(3):
            report = verify(log, deep=False)
            assert report.ok, report.render()
    finally:
        stop.set()
        writer.join()
        store.close()
