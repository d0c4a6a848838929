"""Several processes appending at once while others tail: nothing lost, nothing locked."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

WRITERS, PER_WRITER, TAILERS = 4, 2000, 2


@pytest.mark.timeout(300)
def test_four_writers_two_tailers(db_path: Path, tmp_path: Path) -> None:
    total = WRITERS * PER_WRITER
    tailers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.event_store.tailer_process",
                "--db",
                str(db_path),
                "--expect",
                str(total),
                "--out",
                str(tmp_path / f"tail{i}.txt"),
            ]
        )
        for i in range(TAILERS)
    ]
    # Single-event transactions maximise lock contention; NORMAL keeps the run short
    # (synchronous does not change locking).
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.event_store.writer_process",
                "--db",
                str(db_path),
                "--writer",
                str(w),
                "--batches",
                str(PER_WRITER),
                "--batch-size",
                "1",
                "--synchronous",
                "NORMAL",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(WRITERS)
    ]
    acked: set[str] = set()
    for proc in writers:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0
        lines = out.splitlines()
        assert lines[-1] == "DONE locked=0", "a writer hit 'database is locked'"
        acked.update(line.split()[3] for line in lines if line.startswith("ACK"))
    for proc in tailers:
        assert proc.wait(timeout=120) == 0

    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT position, event_id FROM events ORDER BY position").fetchall()
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    positions = [p for p, _ in rows]
    assert len(rows) == total
    assert positions == list(range(1, total + 1)), "positions must be strictly increasing with no gaps"
    assert {eid for _, eid in rows} == acked

    expected = [f"{p} {e}" for p, e in rows]
    for i in range(TAILERS):
        seen = (tmp_path / f"tail{i}.txt").read_text().splitlines()
        assert seen == expected, f"tailer {i} must see every event exactly once, in order"
