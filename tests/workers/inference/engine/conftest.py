"""A tiny model loaded in this process, for tests that drive llama.cpp's sampler chain directly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.inference.llama import ContextConfig, LlamaLog, LlamaModel, load_llama


@pytest.fixture(scope="module")
def tiny_llm(tiny_gguf: Path) -> Iterator[LlamaModel]:
    log = LlamaLog(lambda level, text: None)
    log.install()
    llm = load_llama(
        str(tiny_gguf), ContextConfig(n_ctx=128, n_parallel=1, warmup=False), log=log, on_progress=lambda p: True
    ).llm
    yield llm
    llm.close()
