"""One real service for all the Ollama tests (session-scoped: the client and contract modules
share it): tiny real GGUFs in its models dir, and the project's Hub (``HF_ENDPOINT``) holding a
tiny GGUF to pull."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import TOOLS_TEMPLATE, write_tiny_gguf
from devtools.tiny_mmproj import write_tiny_mmproj
from tests.conftest_hub import hub_server, unique_repo

__all__ = ["hub_server"]

WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
"""What the ``tools`` model answers to any chat: a tool call in its (Hermes) template's syntax."""


@pytest.fixture(scope="session")
def ollama_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ollama-models")
    write_tiny_gguf(root / "chat.gguf", seed=3)
    write_tiny_gguf(root / "spare.gguf", seed=4)
    write_tiny_gguf(root / "fim.gguf", seed=5, fim=True)  # FIM tokens: generate with a suffix
    # A template that writes tools, and weights that answer every chat with a call (room for the tools' prompt).
    write_tiny_gguf(root / "tools.gguf", seed=6, chat_template=TOOLS_TEMPLATE, n_ctx=1024, reply=WEATHER_CALL)
    write_tiny_gguf(root / "vision" / "vision.gguf", seed=6)  # with its projector beside it: images
    write_tiny_mmproj(root / "vision" / "mmproj-F16.gguf")
    return root


@pytest.fixture(scope="session")
def svc(
    tmp_path_factory: pytest.TempPathFactory, ollama_models: Path, hub_server: HubServer
) -> Iterator[ServiceProcess]:
    env = {"MODELROUTER_MODELS_DIR": str(ollama_models), "HF_ENDPOINT": hub_server.url}
    with ServiceProcess(tmp_path_factory.mktemp("ollama-svc"), env=env) as proc:
        yield proc


@pytest.fixture(scope="session")
def client(svc: ServiceProcess) -> ollama.Client:
    return ollama.Client(host=svc.url, timeout=60)


def publish_tiny(hub_server: HubServer, workdir: Path) -> str:
    """A new repo on the test Hub holding one tiny loadable GGUF, ``<repo>:Q8_0``
    (its bytes stay in ``workdir/tiny-Q8_0.gguf``)."""
    repo = unique_repo("ollama")
    gguf = write_tiny_gguf(workdir / "tiny-Q8_0.gguf", seed=7)
    make_repo(hub_server.root, repo, {"tiny-Q8_0.gguf": gguf})
    return repo


@pytest.fixture
def hub_repo(hub_server: HubServer, tmp_path: Path) -> str:
    """A repo of its own for each test (see :func:`publish_tiny`)."""
    return publish_tiny(hub_server, tmp_path)
