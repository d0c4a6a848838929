"""Why a worker process ended, in words a person can act on.

A bare ``signal 11`` tells a user nothing. In an inference worker each signal
has a usual cause: llama.cpp's kernels die with SIGILL or SIGSEGV when the
library was built for another CPU (or, on Sapphire Rapids and later Xeons, with
llama.cpp's AMX kernels on), and SIGKILL is nearly always the kernel's
out-of-memory killer. :func:`explain_exit` turns the facts the supervisor
observed (exit code or signal, peak memory, whether the OOM killer acted, the
first request) into a reason and a hint. The fold calls it when it folds
``instance_crashed``, so old logs read the same way as new ones.

Pure: stdlib only (``signal`` for names), no I/O.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass

_REBUILD = (
    "rebuild llama-cpp-python on this machine, for its CPU with AMX off (`make clean install` in a checkout; "
    "docs/operations.md says how for a pip install)"
)
_KERNELS = (
    "llama.cpp usually dies this way when it was built for another CPU (a wheel copied from another machine, or "
    "AMX kernels on a Sapphire Rapids or later Xeon) or hits a bug in this model's kernels"
)
# signal -> (what it usually means in an inference worker, what to do)
_MEANINGS: dict[int, tuple[str, str]] = {
    _signal.SIGILL: (f"an instruction this CPU cannot run: {_KERNELS}", _REBUILD),
    _signal.SIGSEGV: (f"a memory fault inside the process: {_KERNELS}", _REBUILD),
    _signal.SIGBUS: (
        "a bus error: the model file changed or was truncated while it was mapped, or llama.cpp was built for "
        "another CPU",
        "check the file with `modelrouter verify --deep`, then " + _REBUILD,
    ),
    _signal.SIGFPE: (f"an arithmetic fault in llama.cpp's kernels: {_KERNELS}", _REBUILD),
    _signal.SIGABRT: (
        "llama.cpp aborted (a failed GGML_ASSERT or an uncaught C++ exception)",
        "the last lines of its stderr say which; a model llama.cpp does not support fails this way",
    ),
    _signal.SIGKILL: (
        "killed outright, usually by the kernel's out-of-memory killer",
        "free memory (unload other models, lower -c or -np), or choose a smaller quantization",
    ),
    _signal.SIGTERM: ("asked to stop by something other than modelrouter", "see who sent it (systemd, a script)"),
    _signal.SIGINT: ("interrupted (Ctrl-C in its terminal?)", "run modelrouter where nothing else signals its workers"),
}


@dataclass(frozen=True, slots=True)
class ExitReason:
    """What a person needs to know about one exit."""

    reason: str  # short and stable: "SIGSEGV", "SIGKILL", "exit code 1"
    message: str  # one sentence: what happened and what it usually means
    hint: str  # what to do about it
    exit_code: int  # as a shell reports it: the code, or 128 + the signal


def signal_name(signum: int) -> str:
    """``SIGSEGV`` for 11; ``signal 99`` for a number this platform does not name."""
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def shell_exit_code(exit_code: int | None, signum: int | None) -> int:
    """The exit status a shell (and llama.cpp's router, which reports a non-zero status) would show."""
    if signum is not None:
        return 128 + signum
    return exit_code if exit_code is not None else 1


def _size(n: int) -> str:
    if n < 1024**2:
        return f"{n / 1024:.0f} KiB"
    return f"{n / 1024**2:.0f} MiB" if n < 1024**3 else f"{n / 1024**3:.1f} GiB"


def explain_exit(
    exit_code: int | None,
    signum: int | None,
    *,
    max_rss_bytes: int | None = None,
    oom_killed: bool | None = None,
    first_request: bool = False,
    what: str = "inference worker",
) -> ExitReason:
    """The reason, message and hint for a worker that ended on its own (a crash)."""
    when = " on its first request" if first_request else ""
    code = shell_exit_code(exit_code, signum)
    if signum is None:
        return ExitReason(
            reason=f"exit code {code}",
            message=f"{what} exited with code {code}{when} without being asked to",
            hint="the last lines of its stderr say why",
            exit_code=code,
        )
    name = signal_name(signum)
    unknown = (_signal.strsignal(signum) or name, "the last lines of its stderr may say why")
    meaning, hint = _MEANINGS.get(signum, unknown)
    if signum == _signal.SIGKILL:
        meaning = _sigkill_meaning(oom_killed)
    held = f"; it held up to {_size(max_rss_bytes)} of memory" if max_rss_bytes else ""
    return ExitReason(
        reason=name,
        message=f"{what} killed by {name}{when}: {meaning}{held}",
        hint=hint,
        exit_code=code,
    )


def _sigkill_meaning(oom_killed: bool | None) -> str:
    if oom_killed:
        return "killed by the kernel's out-of-memory killer (its kill count rose while the worker ran)"
    if oom_killed is False:
        return "killed outright, not by the kernel's out-of-memory killer (its kill count did not change): kill -9?"
    return _MEANINGS[_signal.SIGKILL][0]
