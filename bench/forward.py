"""Forwarding overhead: the same request to the node that serves the model, and through another node.

Starts a real PostgreSQL and two nodes (``--node a``, ``--node b``) on 127.0.0.1;
``b`` alone holds the model, so a request to ``a`` is placed on ``b`` and
forwarded there. Direct (to ``b``) and forwarded (through ``a``) requests
alternate, so machine noise hits both alike; prints p50/p99 of each and the
added p50 (target: at most 2 ms), and the ratio measured in this run.

    python bench/forward.py [--requests 200] [--pause-ms 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.postgres_server import PostgresServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.recovery.migrate import upgrade_url

BODY = {"model": "bench-model", "prompt": "The sea is", "max_tokens": 1, "temperature": 0, "seed": 1}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _once(client: httpx.Client, base: str) -> float:
    started = time.perf_counter()
    client.post(f"{base}/v1/completions", json=BODY).raise_for_status()
    return (time.perf_counter() - started) * 1000


def _node(root: Path, name: str, models: Path, database: str) -> ServiceProcess:
    args = ["--database-url", database, "--node", name]
    env = {"MODELROUTER_MODELS_DIR": str(models)}
    return ServiceProcess(root / f"home-{name}", env=env, args=args, advertised=True)


def _measure(a_url: str, b_url: str, requests: int, pause: float) -> tuple[list[float], list[float]]:
    direct: list[float] = []
    forwarded: list[float] = []
    with httpx.Client(timeout=120) as client:
        for base in (a_url, b_url) * 5:
            _once(client, base)  # loads on b, warms both paths
        for _ in range(requests):
            time.sleep(pause)
            direct.append(_once(client, b_url))
            time.sleep(pause)
            forwarded.append(_once(client, a_url))
    return direct, forwarded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--pause-ms",
        type=float,
        default=0.0,
        help="idle time before each request: every request appends an event that both nodes' "
        "tails then read and fold; back to back, that work overlaps the next request",
    )
    args = parser.parse_args()
    pg = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            database = pg.create_database("bench_forward")
            upgrade_url(database)
            empty, held = root / "models-a", root / "models-b"
            empty.mkdir()
            write_tiny_gguf(held / "bench-model.gguf")
            with _node(root, "a", empty, database) as a, _node(root, "b", held, database) as b:
                direct, forwarded = _measure(a.url, b.url, args.requests, args.pause_ms / 1000)
    finally:
        pg.close()
    d50, f50 = _pct(direct, 0.5), _pct(forwarded, 0.5)
    print(f"{'path':<10} {'p50 ms':>8} {'p99 ms':>8}")
    print(f"{'direct':<10} {d50:>8.2f} {_pct(direct, 0.99):>8.2f}")
    print(f"{'forwarded':<10} {f50:>8.2f} {_pct(forwarded, 0.99):>8.2f}")
    print(f"added p50: {f50 - d50:+.2f} ms (target <= 2 ms); forwarded/direct p50 ratio: {f50 / d50:.3f}")


if __name__ == "__main__":
    main()
