"""Recovery benchmark: time-to-serving at 1k, 100k and 1M events, with and without a snapshot.

For each log size it builds a realistic log (downloads with thousands of
``download_progress`` events each, loads, requests, unloads; every download
finished and every instance stopped, so start-up reconciliation has nothing to
do) straight through sqlite3 in one transaction, using ``codec.encode``'s row
format. Then, on a fresh copy of that log per run:

* ``service``: spawn the real service (``modelrouter serve``) and time until
  ``GET /health`` answers 200 (polled every 50 ms);
* ``service+rebuild``: the same, through a shim that makes the start-up fold
  use ``rebuild_state`` (snapshot + tail), i.e. what the service does once the
  lead wires it in; skipped when ``service.startup`` already calls it;
* ``rebuild_state``: the in-process fold rebuild alone.

"snap" rows first store a snapshot of the fold at the head (what a clean
shutdown leaves) taken with ``save_snapshot``. Ratios compare with the empty-log
baseline of the same column measured in the same run, and snap vs no snap.

``rebuild_state`` runs in a child process (its CPU seconds are printed too), so
that ``--baseline DIR`` (another checkout, e.g. ``git worktree add /tmp/old
main``) can run the same cells with that checkout's ``service`` package, taking
turns with this one's, cell by cell: on a busy machine the ratio is what holds.
Every run prints the CPU, the load average (1 min) before it, and events/s.

    python bench/recovery.py [--sizes 1000,100000,1000000] [--repeat 3] [--keep DIR] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.service_process import ServiceProcess
from service.core import events as ev
from service.core.snapshot import FOLD_VERSION
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent, dumps, encode, format_time
from service.event_store.snapshots import save_snapshot_file
from service.recovery.migrate import upgrade
from service.recovery.rebuild import rebuild_state

_INSERT = (
    "INSERT INTO events (event_id, type, schema_version, model, data, source, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
MODELS = ["org/llama-GGUF:Q4_K_M", "org/qwen-GGUF:Q8_0", "org/phi-GGUF:Q4_K_M", "org/mistral-GGUF:Q5_K_M"]
PROGRESS_PER_DOWNLOAD = 5000
T0 = datetime(2026, 11, 29, tzinfo=UTC)
ENV = {
    "MODELROUTER_RESUME_DOWNLOADS_ON_START": "false",
    "HF_ENDPOINT": "http://127.0.0.1:9",  # never reach out
    "MODELROUTER_SNAPSHOT_EVERY": "10000",
}
# Runs the real CLI with the start-up fold replaced by rebuild_state (for when
# service.startup does not call it yet): the projected wired-in behaviour.
SHIM = """
import sys
from service import startup
from service.event_store.live_state import LiveState
from service.recovery.rebuild import rebuild_state

class RebuildingLiveState(LiveState):
    async def start(self):
        self.state = (await rebuild_state(self.store)).state
        await super().start()

startup.LiveState = RebuildingLiveState
from service.cli import main
sys.exit(main(sys.argv[1:]))
"""


REBUILD = """
import asyncio, sys, time
from pathlib import Path
import service
from service.event_store.async_store import AsyncEventStore
from service.recovery.rebuild import rebuild_state

async def run():
    store = AsyncEventStore(Path(sys.argv[1]), source={"kind": "bench"})
    try:
        cpu = time.process_time()
        result = await rebuild_state(store)
        seconds, replayed = result.duration_ms / 1000.0, result.events_replayed
        print(seconds, time.process_time() - cpu, replayed, Path(service.__file__).parents[1])
    finally:
        await store.close()

asyncio.run(run())
"""
# The in-process fold rebuild of one checkout: prints its seconds and CPU seconds.


# --- building logs ------------------------------------------------------------


class _Rows:
    """Row tuples in ``codec.encode`` order, with cheap ids and timestamps."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.seed = uuid.uuid4().int >> 64
        self.router = dumps({"kind": "router", "pid": 4000})
        self.worker = dumps({"kind": "download_worker", "pid": 4242})

    def _stamp(self) -> str:
        us = len(self.rows) * 10_000  # 10 ms apart
        return format_time(T0 + timedelta(microseconds=us))

    def _id(self) -> str:
        return str(uuid.UUID(int=(self.seed << 64) | len(self.rows)))

    def add(self, event: ev.Event, model: str | None, source: str | None = None) -> None:
        new = NewEvent(event, model=model, event_id=self._id())
        self.rows.append(encode(new, source or self.router, self._stamp()))

    def progress(self, model: str, job: str, count: int, total: int) -> None:
        # The hot 99%: format the payload directly (checked against to_data below).
        step = total // max(count, 1)
        t = T0.timestamp()
        for i in range(count):
            n = len(self.rows)
            eta = float(count - i)
            data = (
                f'{{"job_id":"{job}","bytes_done":{step * (i + 1)},"bytes_total":{total},'
                f'"bytes_per_second":104857600.0,"eta_seconds":{eta!r}}}'
            )
            secs, us = divmod(int(t * 1_000_000) + n * 10_000, 1_000_000)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{us:06d}Z"
            self.rows.append(
                (str(uuid.UUID(int=(self.seed << 64) | n)), "download_progress", 2, model, data, self.worker, stamp)
            )


def _check_row_format() -> None:
    """The fast progress rows must be byte-identical to what the store writes."""
    fast, slow = _Rows(), _Rows()
    fast.progress("m", "job-x", 2, 1000)
    for i in range(2):
        event = ev.DownloadProgress(
            job_id="job-x",
            bytes_done=500 * (i + 1),
            bytes_total=1000,
            bytes_per_second=104857600.0,
            eta_seconds=float(2 - i),
        )
        slow.add(event, "m", slow.worker)
    assert [r[1:] for r in fast.rows] == [r[1:] for r in slow.rows], (fast.rows, slow.rows)


def build_rows(n: int) -> list[tuple[Any, ...]]:
    """About ``n`` events: complete download + load/request/unload cycles."""
    rows = _Rows()
    rows.add(ev.RouterStarted(pid=4000, version="bench", host="127.0.0.1", port=8080), None)
    cycles = max(1, round(n / (PROGRESS_PER_DOWNLOAD + 14)))
    per = max(1, (n - 1 - cycles * 14) // cycles)
    for c in range(cycles):
        model, job, inst = MODELS[c % len(MODELS)], f"job-{c}", f"inst-{c}"
        total = 4_000_000_000 + c
        blob = f"/bench/hub/models--org--x/blobs/{c:064x}"
        files = (
            {
                "path": "model.gguf",
                "size": total,
                "sha256": f"{c:064x}",
                "blob_path": blob,
                "snapshot_path": f"/bench/hub/models--org--x/snapshots/{c:040x}/model.gguf",
            },
        )
        rows.add(
            ev.DownloadRequested(
                job_id=job, repo=model.split(":")[0], commit=f"{c:040x}", quant="Q4_K_M", files=files, total_bytes=total
            ),
            model,
        )
        rows.add(
            ev.DownloadStarted(job_id=job, pid=4242, commit=f"{c:040x}", files=files, total_bytes=total),
            model,
            rows.worker,
        )
        rows.progress(model, job, per if c < cycles - 1 else max(1, n - len(rows.rows) - 12), total)
        rows.add(
            ev.DownloadFinished(
                job_id=job,
                commit=f"{c:040x}",
                files=files,
                bytes_total=total,
                bytes_transferred=total,
                duration_ms=40_000.0,
            ),
            model,
            rows.worker,
        )
        rows.add(ev.InstanceRequested(instance_id=inst, port=9000 + c % 100, params={"n_ctx": 4096}), model)
        rows.add(ev.InstanceLoading(instance_id=inst, pid=5000 + c, endpoint="http://127.0.0.1:9000"), model)
        rows.add(ev.LoadingProgress(instance_id=inst, progress=0.5), model)
        ready = ev.InstanceReady(
            instance_id=inst,
            pid=5000 + c,
            endpoint="http://127.0.0.1:9000",
            load_ms=900.0,
            n_ctx=4096,
            n_params=7_000_000_000,
            file_size=total,
            architecture="llama",
        )
        rows.add(ready, model)
        for _ in range(3):
            rows.add(
                ev.RequestCompleted(instance_id=inst, route="/v1/chat/completions", status_code=200, duration_ms=250.0),
                model,
            )
        rows.add(ev.InstanceStopRequested(instance_id=inst, reason="idle"), model)
        rows.add(ev.InstanceStopped(instance_id=inst, reason="idle", exit_code=0), model)
    return rows.rows


def build_log(path: Path, n: int) -> int:
    """A migrated log at ``path`` with about ``n`` events; returns the exact count."""
    upgrade(path)
    rows = build_rows(n) if n else []
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=OFF")  # a benchmark fixture, rebuilt on failure
        conn.execute("BEGIN")
        conn.executemany(_INSERT, rows)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return len(rows)


def add_snapshot(path: Path) -> int:
    """Store the fold at the head, as a clean shutdown would; returns its position."""

    async def fold_all() -> Any:
        store = AsyncEventStore(path, source={"kind": "bench"})
        try:
            return (await rebuild_state(store)).state
        finally:
            await store.close()

    state = asyncio.run(fold_all())
    save_snapshot_file(path, state, FOLD_VERSION)
    return int(state.position)


# --- measuring ------------------------------------------------------------------


class _ShimProcess(ServiceProcess):
    """``ServiceProcess`` running the CLI through :data:`SHIM`."""

    def start(self, timeout: float = 30.0) -> ServiceProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        cmd = [sys.executable, "-c", SHIM, "serve", "--home", str(self.home), "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.wait_healthy(timeout)
        return self


def _fresh_home(template: Path, work: Path) -> Path:
    home = work / f"home-{uuid.uuid4().hex[:8]}"
    home.mkdir()
    shutil.copyfile(template, home / "modelrouter.db")
    os.sync()  # the copy's write-back must not compete with the timed start
    return home


def _tree_env(tree: Path | None) -> dict[str, str]:
    """The environment that makes a child run ``tree``'s ``service`` package (None: this checkout's)."""
    return {**ENV, "PYTHONPATH": str(tree if tree is not None else Path(__file__).resolve().parents[1])}


def time_to_serving(template: Path, work: Path, kind: type[ServiceProcess], tree: Path | None) -> float:
    home = _fresh_home(template, work)
    proc = kind(home, env=_tree_env(tree))
    started = time.perf_counter()
    try:
        proc.start(timeout=600)
        return time.perf_counter() - started
    finally:
        proc.stop()
        shutil.rmtree(home, ignore_errors=True)


def time_rebuild(template: Path, work: Path, tree: Path | None) -> tuple[float, float, int]:
    """``rebuild_state``'s seconds, CPU seconds and events replayed, in a child process running ``tree``."""
    home = _fresh_home(template, work)
    try:
        out = subprocess.run(
            [sys.executable, "-c", REBUILD, str(home / "modelrouter.db")],
            env={**os.environ, **_tree_env(tree)},
            capture_output=True,
            text=True,
            check=True,
        )
        seconds, cpu, replayed, ran = out.stdout.split()[-4:]
        assert Path(ran) == Path(_tree_env(tree)["PYTHONPATH"]), f"ran {ran}'s service, not {tree}'s"
        return float(seconds), float(cpu), int(replayed)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def machine() -> str:
    """CPU model, cores, Python, SQLite: printed at the top of every run."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    cores = len(os.sched_getaffinity(0))
    return f"{model}, {cores} cores, Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}"


def _load() -> float:
    return os.getloadavg()[0]


def _cell(
    template: Path, work: Path, columns: list[tuple[str, Any]], tree: Path | None, repeat: int, label: str
) -> dict[str, float]:
    """Medians of ``repeat`` runs of each column, each run printed with its load and events/s."""
    runs: dict[str, list[float]] = {}
    for _ in range(repeat):
        for name, kind in columns:
            load = _load()
            seconds = time_to_serving(template, work, kind, tree)
            runs.setdefault(name, []).append(seconds)
            print(f"    {label} {name}: {seconds:.3f}s to serving (load {load:.2f})", flush=True)
        load = _load()
        seconds, cpu, replayed = time_rebuild(template, work, tree)
        runs.setdefault("rebuild_state", []).append(seconds)
        runs.setdefault("rebuild_cpu", []).append(cpu)
        rate = f", {replayed:,} events replayed, {replayed / seconds:,.0f} events/s" if replayed and seconds else ""
        print(f"    {label} rebuild_state: {seconds:.3f}s, CPU {cpu:.3f}s{rate} (load {load:.2f})", flush=True)
    return {name: float(statistics.median(values)) for name, values in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build logs here and keep them (reused when present)")
    parser.add_argument("--baseline", type=Path, help="another checkout: the same cells with its service package")
    args = parser.parse_args()
    _check_row_format()
    print(f"{machine()}; FOLD_VERSION={FOLD_VERSION}; load {os.getloadavg()}", flush=True)
    wired = "rebuild_state" in (Path(__file__).resolve().parents[1] / "service" / "startup.py").read_text()
    columns: list[tuple[str, Any]] = [("service", ServiceProcess)]
    if not wired:
        columns.append(("service+rebuild", _ShimProcess))
    trees: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline is not None:
        trees.append(("baseline", args.baseline.resolve()))
    sizes = [0, *(int(s) for s in args.sizes.split(","))]
    with contextlib.ExitStack() as stack:
        work = (args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-recovery-")))).resolve()
        work.mkdir(parents=True, exist_ok=True)
        os.chdir(work)  # `python -m`/`-c` children put their cwd first on sys.path: no checkout there
        results: dict[str, dict[tuple[int, bool], dict[str, float]]] = {label: {} for label, _ in trees}
        counts: dict[int, int] = {}
        for size in sizes:
            plain, snap = work / f"log-{size}.db", work / f"log-{size}-snap.db"
            t = time.perf_counter()
            if not plain.exists():
                counts[size] = build_log(plain, size)
            else:
                counts[size] = sqlite3.connect(plain).execute("SELECT COUNT(*) FROM events").fetchone()[0]
            built = time.perf_counter() - t
            if not snap.exists():
                shutil.copyfile(plain, snap)
                add_snapshot(snap)
            print(
                f"log {counts[size]:>9,} events: built in {built:.1f}s, {plain.stat().st_size / 1e6:.0f} MB", flush=True
            )
            for with_snap, template in ((False, plain), (True, snap)):
                print(f"  {'snap' if with_snap else 'no snap'}:", flush=True)
                for label, tree in trees:
                    cell = _cell(template, work, columns, tree, args.repeat, label)
                    results[label][(size, with_snap)] = cell
        names = [name for name, _ in columns] + ["rebuild_state", "rebuild_cpu"]
        for label, _ in trees:
            print(f"\n{label}:")
            _print_table(results[label], counts, names, wired)
        if args.baseline is not None:
            _print_ratios(results["this"], results["baseline"], counts, names)


def _print_ratios(
    this: dict[tuple[int, bool], dict[str, float]],
    baseline: dict[tuple[int, bool], dict[str, float]],
    counts: dict[int, int],
    names: list[str],
) -> None:
    """This checkout's medians over the baseline's, cell by cell (measured taking turns)."""
    print("\nthis / baseline (medians of the same run):")
    print(f"{'events':>9} {'snapshot':>8}  " + "  ".join(f"{n:>14}" for n in names))
    for key, cell in this.items():
        parts = [f"{cell[n] / baseline[key][n]:>14.2f}" if baseline[key][n] else f"{'-':>14}" for n in names]
        print(f"{counts[key[0]]:>9,} {'yes' if key[1] else 'no':>8}  " + "  ".join(parts))


def _print_table(
    results: dict[tuple[int, bool], dict[str, float]], counts: dict[int, int], names: list[str], wired: bool
) -> None:
    """Seconds per column, then (x empty-log baseline of that column, x the same log without snapshot)."""
    print()
    print(f"time-to-serving, median seconds; FOLD_VERSION={FOLD_VERSION}; rebuild_state wired into startup: {wired}")
    print("cells: seconds (x empty-log baseline | x same log without snapshot)")
    print(f"{'events':>9} {'snapshot':>8}  " + "  ".join(f"{n:>28}" for n in names))
    baseline = results[(0, False)]
    for (size, with_snap), cell in results.items():
        parts = []
        for n in names:
            vs_empty = cell[n] / baseline[n] if baseline[n] else float("nan")
            vs_plain = f"{cell[n] / results[(size, False)][n]:.2f}" if with_snap else "-"
            parts.append(f"{cell[n]:>9.3f}s ({vs_empty:>7.1f} | {vs_plain:>5})")
        print(f"{counts[size]:>9,} {'yes' if with_snap else 'no':>8}  " + "  ".join(f"{p:>28}" for p in parts))


if __name__ == "__main__":
    main()
