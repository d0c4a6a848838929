"""Fixtures: the real service over a models dir of tiny real GGUF files."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_random_bytes, write_text_as_gguf, write_tiny_gguf, write_truncated_gguf


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    write_tiny_gguf(root / "tiny-a.gguf", seed=1)
    write_tiny_gguf(root / "tiny-b.gguf", seed=2)
    write_truncated_gguf(root / "broken-truncated.gguf")
    write_random_bytes(root / "broken-random.gguf")
    write_text_as_gguf(root / "broken-text.gguf")
    return root


StartService = Callable[..., ServiceProcess]


@pytest.fixture
def start_service(tmp_path: Path, models_dir: Path) -> Iterator[StartService]:
    started: list[ServiceProcess] = []

    def start(**env: Any) -> ServiceProcess:
        variables = {"MODELROUTER_MODELS_DIR": str(models_dir), **{k.upper(): str(v) for k, v in env.items()}}
        proc = ServiceProcess(tmp_path / f"home{len(started)}", env=variables)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()
