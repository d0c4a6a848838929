"""Idle cost and event latency: what an idle ``modelrouter serve`` burns, and how fast a commit reaches SSE.

Two ways of running the tail, side by side in one run:

* ``wakeups``: writers send a datagram after each commit and the tail polls once a
  second as a safety net (the default);
* ``poll 10 ms``: ``MODELROUTER_TAIL_WAKEUPS=false``, the tail polls ``PRAGMA
  data_version`` every 10 ms (every release before this one).

For each: CPU seconds of the service and its workers (psutil, the process tree) over
``--seconds`` of idleness with no model loaded and with one (tiny) model loaded, as a
percentage of one core; then ``--rounds`` appends from another process (the CLI's
store, as a worker's) timed until they arrive on a live ``/events/stream`` client.

Goals: idle CPU <= 0.5 % of a core in both states; commit-to-SSE p50 no worse than the
10 ms poll's.

    python bench/idle.py [--seconds 30] [--rounds 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
from httpx_sse import connect_sse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.event_store.codec import new_event
from service.event_store.sync_store import SyncEventStore

IDLE_GOAL_PERCENT = 0.5
MODES = {"wakeups": "true", "poll 10 ms": "false"}


def _until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.002)
    return value


def _tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every live descendant."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def idle_percent(svc: ServiceProcess, seconds: float) -> float:
    """Percent of one core the service's process tree used over ``seconds`` of nothing to do."""
    before, t0 = _tree_cpu(svc.pid), time.monotonic()
    time.sleep(seconds)
    used, elapsed = _tree_cpu(svc.pid) - before, time.monotonic() - t0
    return 100.0 * used / elapsed


def _loaded(svc: ServiceProcess) -> bool:
    models = httpx.get(f"{svc.url}/models", timeout=30).json()["data"]
    return any(m["id"] == "tiny" and m["status"]["value"] == "loaded" for m in models)


def sse_latency(svc: ServiceProcess, rounds: int) -> list[float]:
    """Milliseconds from another process's commit to its arrival on a live SSE stream."""
    arrived: dict[int, float] = {}
    ready = threading.Event()

    def listen() -> None:
        with httpx.Client(timeout=120) as client, connect_sse(client, "GET", f"{svc.url}/events/stream") as source:
            ready.set()
            for sse in source.iter_sse():
                if sse.id and sse.event == "download_progress":
                    arrived[int(sse.id)] = time.monotonic()
                    if len(arrived) == rounds:
                        return

    threading.Thread(target=listen, daemon=True).start()
    ready.wait(30)
    store = SyncEventStore(svc.home / "modelrouter.db", source={"kind": "bench"})
    took = []
    try:
        for i in range(rounds):
            time.sleep(0.05)  # apart, so each append is one wake-up and one read
            sent = time.monotonic()
            (position,) = store.append(
                [new_event("download_progress", {"job_id": "bench", "bytes_done": i, "bytes_total": rounds})]
            )
            took.append((_until(lambda p=position: arrived.get(p), "SSE delivery") - sent) * 1000)
    finally:
        store.close()
    return took


def run_mode(name: str, flag: str, root: Path, models: Path, seconds: float, rounds: int) -> dict[str, Any]:
    env = {"MODELROUTER_TAIL_WAKEUPS": flag}
    svc = ServiceProcess(root / name.replace(" ", "-"), env=env, args=["--models-dir", str(models)]).start()
    try:
        time.sleep(2.0)  # start-up work (catalogue, snapshot) settles before measuring
        none = idle_percent(svc, seconds)
        httpx.post(f"{svc.url}/models/load", json={"model": "tiny"}, timeout=60).raise_for_status()
        _until(lambda: _loaded(svc), "tiny loaded")
        time.sleep(2.0)  # its warm-up and first instance_stats are not idleness
        one = idle_percent(svc, seconds)
        latency = sse_latency(svc, rounds)
    finally:
        svc.stop()
    return {
        "idle_no_model_percent": round(none, 3),
        "idle_one_model_percent": round(one, 3),
        "sse_p50_ms": round(statistics.median(latency), 2),
        "sse_p95_ms": round(sorted(latency)[int(0.95 * (len(latency) - 1))], 2),
        "sse_rounds_ms": [round(x, 2) for x in latency],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        root = Path(tmp)
        models = root / "models"
        models.mkdir()
        write_tiny_gguf(models / "tiny.gguf")
        for name, flag in MODES.items():
            results[name] = run_mode(name, flag, root, models, args.seconds, args.rounds)
    base, new = results["poll 10 ms"], results["wakeups"]
    print(f"{'':28}{'wakeups':>12}{'poll 10 ms':>12}")
    for key, label in (
        ("idle_no_model_percent", "idle, no model (% core)"),
        ("idle_one_model_percent", "idle, one model (% core)"),
        ("sse_p50_ms", "commit -> SSE p50 (ms)"),
        ("sse_p95_ms", "commit -> SSE p95 (ms)"),
    ):
        print(f"{label:28}{new[key]:>12}{base[key]:>12}")
    ok_idle = max(new["idle_no_model_percent"], new["idle_one_model_percent"]) <= IDLE_GOAL_PERCENT
    ok_latency = new["sse_p50_ms"] <= base["sse_p50_ms"]
    print(
        f"idle goal (<= {IDLE_GOAL_PERCENT} % of a core): {'met' if ok_idle else 'MISSED'}; "
        f"latency goal (p50 no worse than the 10 ms poll): {'met' if ok_latency else 'MISSED'}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
