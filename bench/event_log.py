"""Event-log benchmark: modelrouter's append path vs raw sqlite3 (and vs raw psycopg on
PostgreSQL), and fold speed.

Prints appends/s for 1 and 4 writer processes, single-event transactions and
batches of 100, under the same PRAGMAs (WAL, busy_timeout, synchronous), side by
side with raw ``sqlite3`` doing the same inserts; then the replay rate over
100k events. With PostgreSQL's binaries installed it then starts a throwaway
server (default settings: fsync on) and compares the same appends through the
``SyncEventStore`` (SQLAlchemy + psycopg) and the workers' psycopg writer with raw
psycopg running the same statements (advisory lock, insert with MAX + 1, NOTIFY,
COMMIT: the ratio is what our layers cost, as raw sqlite3 runs our BEGIN IMMEDIATE);
a last column shows what the total order itself costs: raw psycopg inserting into a
table with an identity column and no lock, whose concurrent commits share an fsync.
Ratios are what to compare across machines.

    python bench/event_log.py [--seconds 3] [--synchronous FULL|NORMAL] [--backend sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.postgres_server import PostgresServer, pg_bin_dir, running_postgres
from service.core.events import DownloadProgress, DownloadRequested
from service.core.fold import replay
from service.event_store.codec import TIME_FORMAT, NewEvent
from service.event_store.postgres.sql import PSYCOPG
from service.event_store.pragmas import BUSY_TIMEOUT_MS, configure_connection
from service.event_store.statements import EventFilter
from service.event_store.sync_store import SyncEventStore
from service.event_store.worker_writer import open_writer
from service.recovery.migrate import upgrade, upgrade_url

_INSERT = (
    "INSERT INTO events (event_id, type, schema_version, model, data, source, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(event_id) DO NOTHING RETURNING position"
)


def _payload(i: int) -> DownloadProgress:
    return DownloadProgress(job_id="bench", bytes_done=i, bytes_total=10**9, bytes_per_second=1e8, eta_seconds=3.0)


def _modelrouter_writer(db: str, seconds: float, batch: int, sync: str, out: mp.Queue) -> None:
    store = SyncEventStore(db, source={"kind": "bench"}, synchronous=sync)  # type: ignore[arg-type]
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        store.append([NewEvent(_payload(count + i), model="bench/model") for i in range(batch)])
        count += batch
    out.put(count)


def _raw_writer(db: str, seconds: float, batch: int, sync: str, out: mp.Queue) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    configure_connection(conn, sync)  # type: ignore[arg-type]
    source = json.dumps({"kind": "raw"})
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        conn.execute("BEGIN IMMEDIATE")
        stamp = datetime.now(UTC).strftime(TIME_FORMAT)
        for i in range(batch):
            data = json.dumps(_payload(count + i).to_data(), separators=(",", ":"))
            conn.execute(
                _INSERT, (str(uuid.uuid4()), "download_progress", 2, "bench/model", data, source, stamp)
            ).fetchone()
        conn.execute("COMMIT")
        count += batch
    out.put(count)


def _run(target: object, writers: int, seconds: float, batch: int, sync: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        upgrade(db)
        ctx = mp.get_context("spawn")
        queue: mp.Queue = ctx.Queue()
        procs = [ctx.Process(target=target, args=(str(db), seconds, batch, sync, queue)) for _ in range(writers)]
        for p in procs:
            p.start()
        total = sum(queue.get() for _ in procs)
        for p in procs:
            p.join()
        return total / seconds


def _fold_rate(n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "fold.db"
        upgrade(db)
        store = SyncEventStore(db, source={"kind": "bench"}, synchronous="NORMAL")
        # Realistic: the jobs exist, so every progress event really updates state.
        store.append(
            [
                NewEvent(
                    DownloadRequested(job_id=f"job-{m}", repo="bench/r", commit="c" * 40, files=(), total_bytes=10**9),
                    model=f"m{m}",
                )
                for m in range(5)
            ]
        )
        for start in range(0, n, 1000):
            store.append(
                [
                    NewEvent(
                        DownloadProgress(
                            job_id=f"job-{i % 5}",
                            bytes_done=i,
                            bytes_total=10**9,
                            bytes_per_second=1e8,
                            eta_seconds=3.0,
                        ),
                        model=f"m{i % 5}",
                    )
                    for i in range(start, start + 1000)
                ]
            )
        t0 = time.perf_counter()
        events = []
        after = 0
        while True:
            page = store.read(EventFilter(after=after, limit=1000))
            if not page:
                break
            events.extend(page)
            after = page[-1].position
        t1 = time.perf_counter()
        replay(events)
        t2 = time.perf_counter()
        store.close()
        return n / (t2 - t1), n / (t2 - t0)


def _pg_store_writer(url: str, seconds: float, batch: int, _sync: str, out: mp.Queue) -> None:
    store = SyncEventStore(url, source={"kind": "bench"})
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        store.append([NewEvent(_payload(count + i), model="bench/model") for i in range(batch)])
        count += batch
    out.put(count)


def _pg_worker_writer(url: str, seconds: float, batch: int, _sync: str, out: mp.Queue) -> None:
    writer = open_writer(url, source={"kind": "bench"})
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        writer.append([NewEvent(_payload(count + i), model="bench/model") for i in range(batch)])
        count += batch
    out.put(count)


_NAIVE_PG_INSERT = (
    "INSERT INTO raw_events (event_id, type, schema_version, model, data, source, recorded_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (event_id) DO NOTHING RETURNING position"
)


def _pg_raw(url: str, seconds: float, batch: int, out: mp.Queue, *, naive: bool) -> None:
    import psycopg

    conn = psycopg.connect(url)
    source = json.dumps({"kind": "raw"})
    insert = _NAIVE_PG_INSERT if naive else PSYCOPG.insert
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        with conn.cursor() as cursor:
            if not naive:
                cursor.execute(PSYCOPG.lock or "")
            stamp = datetime.now(UTC).strftime(TIME_FORMAT)
            for i in range(batch):
                data = json.dumps(_payload(count + i).to_data(), separators=(",", ":"))
                cursor.execute(insert, (str(uuid.uuid4()), "download_progress", 2, "bench/model", data, source, stamp))
                cursor.fetchone()
        conn.commit()
        count += batch
    out.put(count)


def _pg_raw_writer(url: str, seconds: float, batch: int, _sync: str, out: mp.Queue) -> None:
    _pg_raw(url, seconds, batch, out, naive=False)


def _pg_naive_writer(url: str, seconds: float, batch: int, _sync: str, out: mp.Queue) -> None:
    _pg_raw(url, seconds, batch, out, naive=True)


def _pg_run(server: PostgresServer, target: object, writers: int, seconds: float, batch: int) -> float:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    url = server.create_database(name)
    upgrade_url(url)
    server.psql(
        "CREATE TABLE raw_events (LIKE events INCLUDING ALL); "
        "ALTER TABLE raw_events ALTER position ADD GENERATED BY DEFAULT AS IDENTITY",
        database=name,
    )
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, seconds, batch, "", queue)) for _ in range(writers)]
    for p in procs:
        p.start()
    total = sum(queue.get(timeout=seconds + 120) for _ in procs)  # a writer that died must not hang the run
    for p in procs:
        p.join()
    server.psql(f"DROP DATABASE {name}")
    return total / seconds


def _postgres_table(seconds: float, repeat: int, fsync: bool) -> None:
    # The four writers of a cell take turns, ``repeat`` rounds, and each figure is its median:
    # on a shared machine an fsync's cost drifts by 2-4x within a minute.
    writers_of = (_pg_store_writer, _pg_worker_writer, _pg_raw_writer, _pg_naive_writer)
    # fsync on is what a real server does; off shows what our layers cost without the disk's wait.
    with running_postgres(fast=not fsync) as server:
        version = server.psql("SHOW server_version")
        print(
            f"\nPostgreSQL {version} (fsync {'on' if fsync else 'off'}), {seconds:.0f} s per cell, median of {repeat}"
        )
        head = f"{'writers':>7} {'batch':>5} {'store/s':>9} {'worker/s':>9} {'raw psycopg/s':>14}"
        print(f"{head} {'store/raw':>9} {'worker/raw':>10} {'no-order/s':>11}")
        for writers in (1, 4):
            for batch in (1, 100):
                runs = [[_pg_run(server, w, writers, seconds, batch) for w in writers_of] for _ in range(repeat)]
                ours, worker, raw, naive = (statistics.median(column) for column in zip(*runs, strict=True))
                cells = f"{writers:>7} {batch:>5} {ours:>9,.0f} {worker:>9,.0f} {raw:>14,.0f}"
                print(f"{cells} {ours / raw:>9.2f} {worker / raw:>10.2f} {naive:>11,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL"])
    parser.add_argument("--fold-events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="PostgreSQL: rounds per cell (medians)")
    parser.add_argument("--pg-fsync", choices=["on", "off"], default="on", help="PostgreSQL: the server's fsync")
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgresql", "both"],
        default=None,
        help="default: both where PostgreSQL's binaries are installed",
    )
    args = parser.parse_args()
    # SIGTERM (a timeout) unwinds like an exception, so the throwaway PostgreSQL server is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    backend = args.backend or ("both" if pg_bin_dir() is not None else "sqlite")
    if backend == "postgresql":
        _postgres_table(args.seconds, args.repeat, args.pg_fsync == "on")
        return
    print(f"synchronous={args.synchronous}, {args.seconds:.0f} s per cell")
    print(f"{'writers':>7} {'batch':>5} {'modelrouter/s':>14} {'raw sqlite3/s':>14} {'ratio':>6}")
    for writers in (1, 4):
        for batch in (1, 100):
            ours = _run(_modelrouter_writer, writers, args.seconds, batch, args.synchronous)
            raw = _run(_raw_writer, writers, args.seconds, batch, args.synchronous)
            print(f"{writers:>7} {batch:>5} {ours:>14,.0f} {raw:>14,.0f} {ours / raw:>6.2f}")
    fold_only, read_and_fold = _fold_rate(args.fold_events)
    print(
        f"fold: {fold_only:,.0f} events/s; read+decode+fold: {read_and_fold:,.0f} events/s over {args.fold_events:,} events"
    )
    if backend == "both":
        _postgres_table(args.seconds, args.repeat, args.pg_fsync == "on")


if __name__ == "__main__":
    main()
