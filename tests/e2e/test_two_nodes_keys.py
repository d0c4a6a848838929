"""Named keys in a cluster (issue 34): two ``modelrouter serve --node`` processes on one PostgreSQL log.

A key made on node ``a`` opens node ``b`` as soon as ``b``'s tail has ``key_created``; a request for
a model ``b`` serves, made with that key through ``a``, is recorded by ``b`` under the key's name;
and a revocation on ``a`` stops the key on both nodes within one second (``b``'s tail is woken by
PostgreSQL's NOTIFY)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.postgres_server import PostgresServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from tests.api.named_keys import FULL, add_key, bearer, full_headers
from tests.eventually import eventually
from tests.service_probes import all_running

GiB = 1024**3
CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}


def _node(root: Path, name: str, model: str, memory: int, database: str) -> ServiceProcess:
    write_tiny_gguf(root / f"models-{name}" / f"{model}.gguf", seed=len(model))
    env = {
        "MODELROUTER_MODELS_DIR": str(root / f"models-{name}"),
        "MODELROUTER_MEMORY_BYTES": str(memory),
        "MODELROUTER_MODELS_MEMORY_MARGIN": "0",
    }
    args = ["--api-key", FULL, "--database-url", database, "--node", name]
    return ServiceProcess(root / f"home-{name}", env=env, args=args, advertised=True)


@pytest.fixture(scope="module")
def cluster(
    pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    root = tmp_path_factory.mktemp("keys-cluster")
    url = pg_server.create_database("cluster_named_keys", template="modelrouter_template")
    a = _node(root, "a", "tiny-a", 4 * GiB, url)
    b = _node(root, "b", "tiny-b", 8 * GiB, url)
    with all_running(a, b):
        yield a, b


def _status(svc: ServiceProcess, secret: str) -> int:
    return httpx.get(f"{svc.url}/v1/models", headers=bearer(secret), timeout=10).status_code


@pytest.mark.timeout(240)
def test_a_key_reaches_every_node_and_its_revocation_counts_within_a_second(
    cluster: tuple[ServiceProcess, ServiceProcess],
) -> None:
    a, b = cluster
    secret = add_key(a, "team", ["tiny-*"])
    eventually(lambda: _status(b, secret) == 200, "b knows the key made on a", timeout=10)
    assert httpx.post(f"{b.url}/models/load", json={"model": "tiny-b"}, headers=full_headers(), timeout=30)

    # Served by b, asked of a: b records the request under the key's name.
    def chat() -> bool:
        answer = httpx.post(
            f"{a.url}/v1/chat/completions", json={"model": "tiny-b", **CHAT}, headers=bearer(secret), timeout=120
        )
        return answer.status_code == 200

    eventually(chat, "a chat for tiny-b through a", timeout=120, interval=0.5)

    def recorded_by_b() -> bool:
        page = httpx.get(
            f"{a.url}/events", params={"type": "request_completed", "limit": 1000}, headers=full_headers(), timeout=30
        ).json()
        return any(e["data"].get("key") == "team" and e["source"].get("node") == "b" for e in page["events"])

    eventually(recorded_by_b, "b's request_completed with key 'team'", timeout=30)

    revoked = httpx.delete(f"{a.url}/keys/team", headers=full_headers(), timeout=30)
    assert revoked.status_code == 200
    since = time.monotonic()
    eventually(lambda: _status(a, secret) == 401 and _status(b, secret) == 401, "the key refused on both", timeout=5)
    assert time.monotonic() - since <= 1.0, "a revocation counts within one second on every node"
