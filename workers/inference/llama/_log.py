"""llama.cpp's log, captured, and load failures classified from it.

Why: llama-cpp-python raises only "Failed to load model from file" for every
failure, and llama.cpp says why only in its log. :class:`LlamaLog` takes that
log over (``llama_log_set``), keeps recent lines and forwards every line at
info level or above (the load log) to the worker's log; :func:`classify_llama_errors` turns its
``error loading model: ...`` text into a reason.

Failure reasons (``LoadError.reason``): ``file_missing``, ``not_gguf``,
``truncated``, ``corrupt``, ``unsupported_architecture``, ``unsupported_option``, ``out_of_memory``,
``aborted`` (stop requested mid-load), ``load_error`` (anything else).
"""

from __future__ import annotations

import collections
import ctypes
import threading
from collections.abc import Callable
from typing import Any

from workers.inference.llama._bindings import lowlevel

# ggml_log_level in the llama.cpp vendored by llama-cpp-python 0.3.36
# (llama_cpp/_logger.py still documents the older numbering).
LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_CONT = 1, 2, 3, 4, 5
_LEVEL_NAMES = {LOG_INFO: "info", LOG_WARN: "warning", LOG_ERROR: "error"}

# Substrings of llama.cpp error text -> reason. First match wins.
_ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    ("unknown model architecture", "unsupported_architecture"),
    ("not within the file bounds", "truncated"),
    ("invalid magic", "not_gguf"),
    ("failed to allocate", "out_of_memory"),
    ("unable to allocate", "out_of_memory"),
    ("out of memory", "out_of_memory"),
    ("cannot allocate memory", "out_of_memory"),
    ("std::bad_alloc", "out_of_memory"),
    ("wrong number of tensors", "corrupt"),
    ("missing tensor", "corrupt"),
    ("tensor data is not", "corrupt"),
    ("gguf_init_from", "corrupt"),
    # The context refused the options it was given (-ctv q8_0 without -fa, a cache type the head size cannot take).
    ("requires flash_attn", "unsupported_option"),
    ("does not divide n_embd_head", "unsupported_option"),
)


class LoadError(Exception):
    """A classified load failure."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


_installed: Any = None  # the ctypes callback llama.cpp holds now (see LlamaLog.install)


class LlamaLog:
    """Receives llama.cpp's log through ``llama_log_set``.

    Keeps recent lines for failure messages and forwards each whole line at info
    level or above to ``forward(level_name, text)`` (the worker's structured stderr
    log, which the service keeps in the worker's file). Must be
    installed after ``llama_cpp.llama`` is imported, since that import
    installs llama-cpp-python's own callback.
    """

    def __init__(self, forward: Callable[[str, str], None], *, keep: int = 200) -> None:
        self._forward = forward
        self._lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=keep)
        self._lock = threading.Lock()
        self._last_level = LOG_INFO
        self._pending, self._pending_level = "", LOG_INFO  # a line llama.cpp has not finished yet
        self._recording, self._recorded = False, list[str]()  # the load's whole info lines

    def install(self) -> None:
        llama_cpp = lowlevel()

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]  # llama_cpp's ctypes callbacks are untyped
        def _callback(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
            self._on_log(level, text.decode("utf-8", errors="replace") if text else "")

        # llama_log_set is process-wide and outlives this object: if the callback were collected while
        # installed, llama.cpp's next log line (a model's free, say) would jump into freed memory (a
        # SIGSEGV seen in the suite when a test dropped its LlamaLog). So the module keeps it.
        global _installed
        _installed = _callback
        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))

    def install_mtmd(self) -> None:
        """Route libmtmd's log (the projector's) here too; call after :meth:`install`."""
        from llama_cpp import mtmd_cpp

        if _installed is not None:
            mtmd_cpp.mtmd_helper_log_set(_installed, ctypes.c_void_p(0))

    def _on_log(self, level: int, text: str) -> None:
        out: list[tuple[int, str]] = []  # whole lines, forwarded outside the lock
        with self._lock:
            if level == LOG_CONT:
                level = self._last_level
                if self._lines and not self._lines[-1][1].endswith("\n"):
                    prev_level, prev = self._lines.pop()
                    self._lines.append((prev_level, prev + text))
                elif level >= LOG_INFO:
                    self._lines.append((level, text))
            else:
                self._last_level = level
                if self._pending:  # a line left unfinished: forwarded as it is
                    out.append((self._pending_level, self._pending))
                    self._pending = ""
                if level >= LOG_INFO:
                    self._lines.append((level, text))
            if level >= LOG_INFO:
                self._pending_level, self._pending = level, self._pending + text
                if self._pending.endswith("\n"):
                    out.append((self._pending_level, self._pending))
                    self._pending = ""
            if self._recording:
                self._recorded.extend(line for _, line in out)
        for line_level, line in out:
            self._emit(line_level, line)

    def record(self, on: bool) -> None:
        """Start (``on``) or stop keeping every whole line at info level or above: the load log, whose
        offload and buffer lines say where the model went (:func:`service.core.load_log.parse_load_log`).
        Starting forgets what an earlier recording kept."""
        with self._lock:
            if on:
                self._recorded = []
            self._recording = on

    def recorded(self) -> list[str]:
        """The lines kept since :meth:`record` started (a load: a few hundred)."""
        with self._lock:
            return list(self._recorded)

    def _emit(self, level: int, text: str) -> None:
        """One whole line of llama.cpp's log to the worker's log (its file keeps the info level:
        the load log; the service shows it on the console only at ``-v``, as llama-server does)."""
        if text.strip():
            self._forward(_LEVEL_NAMES.get(level, "info"), text.rstrip())

    def warn(self, text: str) -> None:
        """A warning of llama-server's own (not llama.cpp's log), in the same stream: the console shows
        its text exactly, as llama-server prints it to stderr."""
        self._forward("warning", text)

    def errors(self) -> list[str]:
        with self._lock:
            return [t.strip() for lvl, t in self._lines if lvl == LOG_ERROR and t.strip()]

    def mark(self) -> None:
        """Forget earlier lines so :meth:`errors` reflects only what follows."""
        with self._lock:
            self._lines.clear()


def classify_llama_errors(lines: list[str]) -> LoadError:
    """Turn llama.cpp error log lines into a reason and a readable message."""
    text = "\n".join(lines)
    lowered = text.lower()
    reason = "load_error"
    for needle, candidate in _ERROR_PATTERNS:
        if needle in lowered:
            reason = candidate
            break
    # The most specific line is "llama_model_load: error loading model: <why>".
    message = next((ln.split("error loading model:", 1)[1].strip() for ln in lines if "error loading model:" in ln), "")
    return LoadError(reason, message or text or "llama.cpp failed to load the model")
