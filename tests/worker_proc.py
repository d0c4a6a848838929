"""What the worker tests share about a worker subprocess writing JSON-lines events."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.runtime import read_jsonl


@dataclass
class WorkerUnderTest:
    """A ``python -m workers.…`` child with its event file and stderr file."""

    proc: subprocess.Popen[bytes]
    events_path: Path
    stderr_path: Path

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return read_jsonl(self.events_path)

    def types(self) -> list[str]:
        return [t for t, _ in self.events()]

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [d for t, d in self.events() if t == type_]

    def wait_event(self, type_: str, timeout: float = 20.0) -> dict[str, Any]:
        """The first event of ``type_``; fails early if the process exits without it."""
        deadline = time.monotonic() + timeout
        while True:
            exited = self.proc.poll() is not None  # read events after checking: none are missed
            found = self.of_type(type_)
            if found:
                return found[0]
            if exited:
                msg = f"worker exited ({self.proc.returncode}) without {type_}: {self.types()}\n{self.stderr_tail()}"
                raise AssertionError(msg)
            if time.monotonic() > deadline:
                raise AssertionError(f"no {type_} within {timeout}s: {self.types()}\n{self.stderr_tail()}")
            time.sleep(0.01)

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-n:]
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
