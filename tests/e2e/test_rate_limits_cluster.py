"""A named key's rpm across two nodes on one PostgreSQL log (issue 34): requests alternate between
node ``a`` and node ``b``, for a model each node holds, so some are served where they arrive and
some forwarded to the other node. Every node counts each request once (its own admissions, the
other's ``request_completed`` as its tail delivers them), so the total admitted stays within 10 %
of the limit, however the requests are spread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.postgres_server import PostgresServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core.key_commands import ScopeRequest
from tests.e2e.named_keys import add_key
from tests.eventually import eventually
from tests.service_probes import all_running

KEY = "cluster-limits-key"
RPM = 30
pytestmark = pytest.mark.timeout(300)


def _node(root: Path, name: str, database: str, model: str) -> ServiceProcess:
    folder = root / f"models-{name}"
    write_tiny_gguf(folder / f"{model}.gguf", n_ctx=256)
    args = ["--api-key", KEY, "--database-url", database, "--node", name]
    # A window far longer than the test: every request below falls in one window.
    env = {"MODELROUTER_MODELS_DIR": str(folder), "MODELROUTER_RATE_WINDOW_S": "600"}
    return ServiceProcess(root / f"home-{name}", env=env, args=args, advertised=True)


@pytest.fixture
def cluster(pg_server: PostgresServer, tmp_path: Path) -> Iterator[tuple[str, ServiceProcess, ServiceProcess]]:
    database = pg_server.create_database("cluster_limits", template="modelrouter_template")
    a = _node(tmp_path, "a", database, "tiny-a")
    b = _node(tmp_path, "b", database, "tiny-b")
    with all_running(a, b):
        yield database, a, b


def _chat(node: ServiceProcess, model: str, secret: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    auth = {"Authorization": f"Bearer {secret}"}
    return httpx.post(f"{node.url}/v1/chat/completions", json=body, headers=auth, timeout=120).status_code


def _known(node: ServiceProcess, secret: str) -> int | None:
    status = _chat(node, "tiny-a", secret)
    return None if status == 401 else status


def test_rpm_holds_across_two_nodes_within_ten_percent(cluster: tuple[str, ServiceProcess, ServiceProcess]) -> None:
    """Twice the limit's requests, alternating nodes and models: about rpm are admitted, the rest 429."""
    database, a, b = cluster
    full = {"Authorization": f"Bearer {KEY}"}
    for node, model in ((a, "tiny-a"), (b, "tiny-b")):  # loaded first: the limit is not about loads
        assert httpx.post(f"{node.url}/models/load", json={"model": model}, headers=full, timeout=60).is_success
    secret = add_key(database, "team", ScopeRequest(rpm=RPM))
    # The key reaches each node through its tail; the first answer that is no 401 was admitted.
    probes = [eventually(lambda n=n: _known(n, secret), f"the key known on {n.url}", timeout=20) for n in (a, b)]
    # Then requests alternate: a serves tiny-a, b forwards tiny-a to a, a forwards tiny-b to b, b serves it.
    plan = [((a, b)[i % 2], ("tiny-a", "tiny-b")[(i // 2) % 2]) for i in range(2 * RPM)]
    statuses = probes + [_chat(node, model, secret) for node, model in plan]
    assert set(statuses) <= {200, 429}, statuses
    admitted = statuses.count(200)
    assert RPM * 0.9 <= admitted <= RPM * 1.1, (admitted, statuses)
    assert statuses[-4:] == [429] * 4, "once the limit is reached, both nodes refuse, local or forwarded"
