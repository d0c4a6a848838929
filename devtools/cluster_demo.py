"""``make cluster-demo``: PostgreSQL and two nodes on 127.0.0.1, and a model walked across them.

Both nodes hold the same tiny model; node ``b`` declares more memory, so the
first request (sent to ``a``) is placed on ``b`` and forwarded there. Then ``b``
is killed with SIGKILL: ``a`` records ``node_lost`` and serves the model itself.
Everything it prints comes from ``GET /nodes``, ``GET /models`` and ``GET /events``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from devtools.postgres_server import PostgresServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.recovery.migrate import upgrade_url

GiB = 1024**3
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


def _node(root: Path, name: str, database: str, memory: int) -> ServiceProcess:
    models = root / f"models-{name}"
    write_tiny_gguf(models / "tiny.gguf")
    args = ["--database-url", database, "--node", name]
    env = {"MODELROUTER_MODELS_DIR": str(models), "MODELROUTER_MEMORY_BYTES": str(memory)}
    return ServiceProcess(root / f"home-{name}", env=env, args=args, advertised=True)


def _where(svc: ServiceProcess) -> Any:
    entry = next(m for m in httpx.get(f"{svc.url}/models", timeout=10).json()["data"] if m["id"] == "tiny")
    return entry["status"].get("node")


def _walk(a: ServiceProcess, b: ServiceProcess) -> None:
    nodes = httpx.get(f"{a.url}/nodes", timeout=10).json()["data"]
    print("nodes:", ", ".join(f"{n['name']} ({n['state']}, {n['memory_bytes'] // GiB} GiB for models)" for n in nodes))
    answer = httpx.post(f"{a.url}/v1/chat/completions", json=CHAT, timeout=120)
    print(f"asked node a -> {answer.status_code}; tiny runs on node {_where(a)} (forwarded there)")
    b.kill9()
    print("kill -9 node b ...")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        lost = httpx.get(f"{a.url}/events", params={"type": "node_lost"}, timeout=10).json()["events"]
        if lost:
            print(f"node a recorded node_lost for {lost[0]['data']['node']} (position {lost[0]['position']})")
            break
        time.sleep(0.2)
    answer = httpx.post(f"{a.url}/v1/chat/completions", json=CHAT, timeout=120)
    print(f"asked node a again -> {answer.status_code}; tiny now runs on node {_where(a)}")


def main() -> None:
    pg = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            database = pg.create_database("cluster_demo")
            upgrade_url(database)
            print(f"PostgreSQL: {database}")
            with _node(root, "a", database, 4 * GiB) as a, _node(root, "b", database, 8 * GiB) as b:
                _walk(a, b)
    finally:
        pg.close()


if __name__ == "__main__":
    main()
