"""llama-server's ``--log-prompts-dir``: each completion's prompt, written to ``<dir>/<ms>.txt``.

As ``server-context.cpp`` does it: the file is named after ``ggml_time_ms()``
(milliseconds of the monotonic clock), 12 digits (two prompts in the same
millisecond share a file, as there), and holds the prompt as given: a chat's rendered prompt, a completion's
text, or a token list as indented JSON. The directory is created when missing;
a file that cannot be written is a warning in the worker's log, never a failed
request (llama-server logs ``failed to create`` and goes on). For debugging only:
prompts are what users typed.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PromptLog = Callable[[Any], None]


def prompt_logger(directory: str | None) -> PromptLog | None:
    """A writer of prompts into ``directory``; None without one (``--log-prompts-dir`` not given)."""
    if not directory:
        return None
    root = Path(directory)

    def write(prompt: Any) -> None:
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, indent=2)
        path = root / f"{time.monotonic_ns() // 1_000_000:012d}.txt"  # ggml_time_ms(): CLOCK_MONOTONIC
        try:
            root.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            print(
                json.dumps({"event": "prompt_log_failed", "level": "warning", "path": str(path), "error": str(exc)}),
                file=sys.stderr,
                flush=True,
            )

    return write
