"""SIGKILL a writer in the middle of its batches, 20 times."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

BATCH = 10
ROUNDS = 20


@pytest.mark.timeout(240)
def test_kill9_mid_batch_keeps_log_whole(db_path: Path) -> None:
    rng = random.Random(1234)
    acked_ids: set[str] = set()
    for round_ in range(ROUNDS):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.event_store.writer_process",
                "--db",
                str(db_path),
                "--writer",
                str(round_),
                "--batches",
                "100000",
                "--batch-size",
                str(BATCH),
            ],
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert proc.stdout is not None
        # Wait for the first acknowledgement, then kill at a random moment mid-stream.
        first = proc.stdout.readline()
        assert first.startswith("ACK"), first
        time.sleep(rng.uniform(0.0, 0.25))  # a random moment to kill at, not a wait for anything
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate()
        for line in [first, *rest.splitlines()]:
            if line.startswith("ACK"):
                acked_ids.update(line.split()[3].split(","))
        assert proc.returncode == -signal.SIGKILL

        with sqlite3.connect(db_path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            rows = conn.execute("SELECT event_id, json_extract(data, '$.job_id') FROM events").fetchall()
        stored_ids = {eid for eid, _ in rows}
        assert acked_ids <= stored_ids, "an acknowledged event is missing"
        sizes = Counter(job for _, job in rows)
        torn = {job: n for job, n in sizes.items() if n != BATCH}
        assert not torn, f"partly stored batches: {torn}"
