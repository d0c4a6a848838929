"""A writer process for the concurrency and kill -9 tests.

Appends ``--batches`` batches of ``--batch-size`` events (or as many as fit in
``--seconds``) and prints one line per *acknowledged* (committed) batch:
``ACK <batch> <first_position> <event_id,...>``. Counts "database is locked"
errors instead of dying on them. ``--db`` is a SQLite file or a PostgreSQL URL;
``--writer-kind worker`` appends through the workers' writer instead of the
CLI tools' store.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
import uuid
from typing import Any

from sqlalchemy.exc import OperationalError

from service.core.events import DownloadProgress
from service.event_store.codec import NewEvent
from service.event_store.sync_store import SyncEventStore
from service.event_store.worker_writer import open_writer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--writer", type=int, required=True)
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long instead of --batches")
    parser.add_argument("--min-batches", type=int, default=0, help="with --seconds: at least this many, however slow")
    parser.add_argument("--writer-kind", choices=("store", "worker"), default="store")
    args = parser.parse_args()
    source = {"kind": "test_writer", "writer": args.writer}
    if args.writer_kind == "worker":
        store: SyncEventStore | Any = open_writer(args.db, source=source)
    else:
        store = SyncEventStore(args.db, source=source, synchronous=args.synchronous)
    locked = 0
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    for batch in range(args.batches):
        if deadline is not None and batch >= args.min_batches and time.monotonic() > deadline:
            break
        job = f"w{args.writer}-b{batch}"
        events = [
            NewEvent(
                DownloadProgress(job_id=job, bytes_done=i, bytes_total=args.batch_size),
                model=f"writer-{args.writer}",
                event_id=str(uuid.uuid4()),
            )
            for i in range(args.batch_size)
        ]
        while True:
            try:
                positions = store.append(events)
                break
            except (OperationalError, sqlite3.OperationalError) as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                locked += 1
        ids = ",".join(e.event_id for e in events)
        sys.stdout.write(f"ACK {job} {positions[0]} {ids}\n")
        sys.stdout.flush()
    sys.stdout.write(f"DONE locked={locked}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
