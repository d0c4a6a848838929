"""How many open SSE streams the service serves well: the basis of ``MODELROUTER_MAX_STREAMS``.

Each open ``/events/stream`` holds a connection and wakes on every append, so
the cost of one event grows with the number of streams. For N open streams,
this opens N raw connections (asyncio sockets: the client stays cheap), then
appends events from another process, as a worker does, and measures:

    fan-out  time from an append until the last of the N streams received it (p50, max)
    health   how long GET /health takes meanwhile (the service's own responsiveness)
    rss      the service's resident memory

"Served well" = every stream gets every event, fan-out p50 stays under 250 ms
(the SSE goal of bench/reaction.py) and /health under 100 ms.

    python bench/sse_streams.py [--counts 100,300,1000,2000,4000] [--events 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.service_process import ServiceProcess
from service.event_store.codec import new_event
from service.event_store.sync_store import SyncEventStore


async def _open_stream(port: int, ready: asyncio.Event, got: dict[str, float], opened: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /events/stream?type=model_configured HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        opened.append(0)
        writer.close()
        return
    opened.append(1)
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"data: "):
                marker = json.loads(line[6:])["data"]["aliases"][0]
                got[marker] = time.perf_counter()
                ready.set()
    finally:
        writer.close()


async def _measure(svc: ServiceProcess, count: int, n_events: int) -> dict[str, float]:
    opened: list[int] = []
    received: list[dict[str, float]] = [{} for _ in range(count)]
    ready = asyncio.Event()
    tasks = [asyncio.create_task(_open_stream(svc.port, ready, received[i], opened)) for i in range(count)]
    while len(opened) < count:
        await asyncio.sleep(0.05)
    store = SyncEventStore(svc.home / "modelrouter.db", source={"kind": "bench"})
    fanout, health = [], []
    async with httpx.AsyncClient(base_url=svc.url, timeout=30) as client:
        for i in range(n_events):
            marker = f"m{i}"
            sent = time.perf_counter()
            await asyncio.to_thread(store.append, [new_event("model_configured", {"aliases": [marker]}, model="bench")])
            deadline = sent + 30
            while sum(marker in r for r in received) < sum(opened) and time.perf_counter() < deadline:
                await asyncio.sleep(0.002)
            fanout.append(max((r.get(marker, deadline) for r in received if r), default=deadline) - sent)
            started = time.perf_counter()
            await client.get("/health")
            health.append(time.perf_counter() - started)
    store.close()
    rss = psutil.Process(svc.pid).memory_info().rss
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    missed = sum(1 for r in received for i in range(n_events) if f"m{i}" not in r and r)
    return {
        "open": sum(opened),
        "fanout_p50_ms": statistics.median(fanout) * 1000,
        "fanout_max_ms": max(fanout) * 1000,
        "health_p50_ms": statistics.median(health) * 1000,
        "rss_mb": rss / 2**20,
        "missed": missed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="100,300,1000,2000,4000")
    parser.add_argument("--events", type=int, default=20)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # N client + N server sockets
    print(
        f"{'streams':>8} {'open':>6} {'fan-out p50':>12} {'fan-out max':>12} {'/health p50':>12} {'rss MB':>8} {'missed':>7}"
    )
    for count in (int(c) for c in args.counts.split(",")):
        with tempfile.TemporaryDirectory() as home:
            env = {"MODELROUTER_MAX_STREAMS": "0", "MODELROUTER_SSE_KEEPALIVE": "60"}
            with ServiceProcess(Path(home), env=env) as svc:
                r = asyncio.run(_measure(svc, count, args.events))
        print(
            f"{count:>8} {r['open']:>6} {r['fanout_p50_ms']:>10.0f}ms {r['fanout_max_ms']:>10.0f}ms "
            f"{r['health_p50_ms']:>10.1f}ms {r['rss_mb']:>8.0f} {r['missed']:>7}",
            flush=True,
        )


if __name__ == "__main__":
    main()
