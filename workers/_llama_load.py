"""Load a GGUF into ``llama_cpp.Llama`` and explain failures precisely.

Why: llama-cpp-python raises only "Failed to load model from file" for every
failure. We (1) pre-check the file structurally (:mod:`workers._gguf_check`),
(2) capture llama.cpp's own log lines through ``llama_log_set`` and classify
its ``error loading model: ...`` text, and (3) hook the load-progress
callback so the service sees ``loading_progress`` on big models.

Failure reasons (``LoadError.reason``): ``file_missing``, ``not_gguf``,
``truncated``, ``corrupt``, ``unsupported_architecture``, ``out_of_memory``,
``aborted`` (stop requested mid-load), ``load_error`` (anything else).
"""

from __future__ import annotations

import collections
import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the check imports gguf + numpy (~60 ms): only where a load needs it
    from workers._gguf_check import GGUFInfo

# ggml_log_level in the llama.cpp vendored by llama-cpp-python 0.3.36
# (llama_cpp/_logger.py still documents the older numbering).
LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_CONT = 1, 2, 3, 4, 5

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
)


class LoadError(Exception):
    """A classified load failure."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class LlamaLog:
    """Receives llama.cpp's log through ``llama_log_set``.

    Keeps recent lines for failure messages and forwards warnings/errors to
    ``forward(level_name, text)`` (the worker's structured stderr log). Must be
    installed after ``llama_cpp.llama`` is imported, since that import
    installs llama-cpp-python's own callback.
    """

    def __init__(self, forward: Callable[[str, str], None], *, keep: int = 200) -> None:
        self._forward = forward
        self._lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=keep)
        self._lock = threading.Lock()
        self._last_level = LOG_INFO
        self._c_callback: Any = None  # must stay referenced while installed

    def install(self) -> None:
        from workers._llama_model import lowlevel

        llama_cpp = lowlevel()

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]  # llama_cpp's ctypes callbacks are untyped
        def _callback(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
            self._on_log(level, text.decode("utf-8", errors="replace") if text else "")

        self._c_callback = _callback
        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))

    def _on_log(self, level: int, text: str) -> None:
        with self._lock:
            if level == LOG_CONT:
                level = self._last_level
                if self._lines and not self._lines[-1][1].endswith("\n"):
                    prev_level, prev = self._lines.pop()
                    self._lines.append((prev_level, prev + text))
                    return
            self._last_level = level
            if level >= LOG_INFO:
                self._lines.append((level, text))
        if level in (LOG_WARN, LOG_ERROR):
            self._forward("error" if level == LOG_ERROR else "warning", text.rstrip())

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


class Loaded(Protocol):
    """A loaded model, however it was loaded: what ``instance_ready`` reports, and the
    model its engine runs (``llm``); ``phases`` are milliseconds per load step, if measured."""

    @property
    def llm(self) -> Any: ...
    @property
    def load_ms(self) -> float: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def n_params(self) -> int: ...
    @property
    def file_size(self) -> int: ...
    @property
    def architecture(self) -> str: ...
    @property
    def phases(self) -> dict[str, float]: ...


@dataclass(frozen=True)
class LoadedModel:
    """A ``llama_cpp.Llama`` loaded by :func:`load_model` (the legacy engine)."""

    llm: Any  # llama_cpp.Llama (typed Any: llama_cpp has no complete stubs)
    info: GGUFInfo
    load_ms: float
    n_params: int
    n_ctx: int
    # The C progress callback stays referenced for the model's lifetime: the
    # loaded params struct still points at it.
    keepalive: Any = None
    phases: dict[str, float] = field(default_factory=dict)  # not measured on this path

    @property
    def file_size(self) -> int:
        return self.info.file_size

    @property
    def architecture(self) -> str:
        return self.info.architecture or ""


def _with_progress_callback(on_progress: Callable[[float], bool]) -> tuple[Callable[[], None], Any]:
    """Patch ``llama_model_default_params`` so ``Llama()`` loads with our callback.

    Why a patch: ``Llama.__init__`` builds its ``llama_model_params`` from that
    function and exposes no hook. Returns (restore, c_callback_keepalive).
    """
    import llama_cpp.llama_cpp as lc

    @lc.llama_progress_callback  # type: ignore[untyped-decorator]  # llama_cpp's ctypes callbacks are untyped
    def _progress(progress: float, _user_data: ctypes.c_void_p) -> bool:
        try:
            return bool(on_progress(float(progress)))
        except Exception:  # never let a Python error unwind through C
            return True

    original = lc.llama_model_default_params

    def patched() -> Any:
        params = original()
        params.progress_callback = _progress
        params.progress_callback_user_data = None
        return params

    lc.llama_model_default_params = patched

    def restore() -> None:
        lc.llama_model_default_params = original

    return restore, _progress


def effective_n_ctx(requested: int, info: GGUFInfo) -> int:
    """``requested`` capped to the model's training context (0 = use training context).

    Why cap: a context beyond training length wastes KV-cache RAM and degrades output.
    """
    arch = info.architecture or ""
    trained = info.metadata.get(f"{arch}.context_length")
    if not isinstance(trained, int) or trained <= 0:
        return requested or 4096
    return trained if requested <= 0 else min(requested, trained)


def load_model(
    model_path: str,
    *,
    log: LlamaLog,
    on_progress: Callable[[float], bool],
    n_ctx: int,
    n_threads: int,
    n_threads_batch: int,
    n_batch: int,
    embedding: bool,
    chat_format: str | None,
    seed: int | None,
) -> LoadedModel:
    """Pre-check, then load; raises :class:`LoadError`. Call on the thread that will own the model."""
    from workers._gguf_check import GGUFCheckError, inspect_gguf

    t0 = time.monotonic()
    try:
        info = inspect_gguf(model_path)
    except GGUFCheckError as exc:
        raise LoadError(exc.reason, exc.message) from None
    import llama_cpp

    aborted = threading.Event()

    def progress(p: float) -> bool:
        keep_going = on_progress(p)
        if not keep_going:
            aborted.set()
        return keep_going

    restore, keepalive = _with_progress_callback(progress)
    log.mark()
    kwargs: dict[str, Any] = dict(
        n_ctx=effective_n_ctx(n_ctx, info),
        n_threads=n_threads,
        n_threads_batch=n_threads_batch,
        n_batch=n_batch,
        embedding=embedding,
        chat_format=chat_format,
        verbose=False,
    )
    if seed is not None:
        kwargs["seed"] = seed
    if embedding and f"{info.architecture}.pooling_type" not in info.metadata:
        # Generative models carry no pooling type, and llama.cpp's default
        # ("none") yields one vector per *token*; OpenAI clients expect one
        # per input, so mean-pool like most embedding models.
        kwargs["pooling_type"] = llama_cpp.LLAMA_POOLING_TYPE_MEAN
    try:
        llm = llama_cpp.Llama(model_path, **kwargs)
    except MemoryError as exc:
        raise LoadError("out_of_memory", f"Python MemoryError while loading: {exc}") from None
    except Exception as exc:
        if aborted.is_set():
            raise LoadError("aborted", "load aborted by a stop request") from None
        err = classify_llama_errors(log.errors())
        if err.reason == "load_error" and not log.errors():
            err = LoadError("load_error", str(exc))
        raise err from None
    finally:
        restore()
    on_progress(1.0)
    return LoadedModel(
        llm=llm,
        info=info,
        load_ms=round((time.monotonic() - t0) * 1000.0, 3),
        n_params=int(llama_cpp.llama_model_n_params(llm._model.model)),
        n_ctx=int(llm.n_ctx()),
        keepalive=keepalive,
    )
