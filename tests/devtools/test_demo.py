"""``make demo`` end to end (the Gemma 3 270M GGUF is a test dependency too)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest_hub import REPO_ROOT


@pytest.mark.timeout(240)
def test_demo_pulls_answers_in_words_and_says_what_next() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODELROUTER_", "LLAMA_"))}
    result = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--exit", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=220,
        cwd=REPO_ROOT,
        env={**env, "COLUMNS": "160"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    assert "253.1/253.1 MB" in out and "downloaded in" in out  # the pull's bar, finished
    answer = out.split("loaded in", 1)[1].split("3. What the log remembers", 1)[0]
    assert "Paris" in answer  # a real model, at a low temperature with a fixed seed
    assert "1 loads, 0 restarts, 0 crashes, 1 requests served" in out
    assert "Dashboard: http://127.0.0.1:" in out and "Try next" in out
