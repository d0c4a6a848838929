"""``POST /v1/chat/completions/control`` in a cluster (issue 29 §5): two ``modelrouter serve --node``
processes on one PostgreSQL log; only node ``b`` holds the thinking model, so its chats, sent to
node ``a``, run on ``b``'s worker. A control sent to ``a`` reaches it: naming the model (as
llama-server's router routes it) or naming none (``a`` asks every running model's worker, ``b``'s
through ``b``). Both nodes run with an API key, which the hop to ``b`` carries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.postgres_server import PostgresServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import TOOLS_TEMPLATE, write_tiny_gguf
from tests.chat_control import NOT_FOUND, assert_control_ends_reasoning, control
from tests.service_probes import all_running

KEY = "cluster-control-key"
AUTH = {"Authorization": f"Bearer {KEY}"}

pytestmark = pytest.mark.timeout(240)


def _node(root: Path, name: str, database: str, models: dict[str, str | None]) -> ServiceProcess:
    folder = root / f"models-{name}"
    for model, template in models.items():
        write_tiny_gguf(folder / f"{model}.gguf", chat_template=template, n_ctx=256)
    args = ["--api-key", KEY, "--context-shift", "--database-url", database, "--node", name]
    env = {"MODELROUTER_MODELS_DIR": str(folder)}
    return ServiceProcess(root / f"home-{name}", env=env, args=args, advertised=True)


@pytest.fixture(scope="module")
def nodes(pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    root = tmp_path_factory.mktemp("cluster-control")
    database = pg_server.create_database("cluster_control", template="modelrouter_template")
    a = _node(root, "a", database, {"plain": None})
    b = _node(root, "b", database, {"think": TOOLS_TEMPLATE})
    with all_running(a, b):
        yield a, b


@pytest.mark.parametrize("named", [{"model": "think"}, {}], ids=["model-named", "by-id"])
def test_a_control_sent_to_one_node_ends_the_reasoning_of_a_chat_on_the_other(
    nodes: tuple[ServiceProcess, ServiceProcess], named: dict[str, Any]
) -> None:
    a, _ = nodes
    assert_control_ends_reasoning(a.url, {"model": "think"}, named, AUTH)
    think = next(m for m in httpx.get(f"{a.url}/models", headers=AUTH, timeout=30).json()["data"] if m["id"] == "think")
    assert think["status"]["node"] == "b", "the chat ran on the other node"
    assert control(a.url, {"id": "chatcmpl-none", "action": "reasoning_end"}, headers=AUTH) == NOT_FOUND
