"""Facts about worker processes that only the supervisor observes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """How a worker process ended, as ``waitpid`` told the supervisor."""

    exit_code: int | None
    signal: int | None
    forced: bool = False  # the supervisor had to SIGKILL it
    stderr_tail: str = ""
    max_rss_bytes: int | None = None  # peak resident memory, from wait4's rusage
    oom_killed: bool | None = None  # whether the kernel's OOM kill count rose while it ran (None: unknown)

    def describe(self) -> str:
        """``signal 9`` or ``exit code 1``, for messages."""
        return f"signal {self.signal}" if self.signal is not None else f"exit code {self.exit_code}"
