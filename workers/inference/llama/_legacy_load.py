"""Load a GGUF into ``llama_cpp.Llama`` (the legacy engine) and explain failures precisely.

Why: llama-cpp-python raises only "Failed to load model from file" for every
failure. We (1) pre-check the file structurally (:mod:`workers.inference.llama._gguf_check`),
(2) capture llama.cpp's own log lines (:class:`~workers.inference.llama._log.LlamaLog`) and
classify its ``error loading model: ...`` text, and (3) hook the load-progress
callback so the service sees ``loading_progress`` on big models.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from service.core.devices import Offload
from workers.inference.llama._log import LlamaLog, LoadError, classify_llama_errors
from workers.inference.llama._offload import (
    JsonValue,
    Placement,
    apply_placement,
    context_params_used,
    model_params_used,
)

if TYPE_CHECKING:  # the check imports gguf + numpy (~60 ms): only where a load needs it
    from workers.inference.llama._gguf_check import GGUFInfo


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
    used: dict[str, JsonValue] = field(default_factory=dict)  # the offload fields it loaded with
    offload: Offload = field(default_factory=Offload)  # instance_ready.offload, from the load log

    @property
    def n_layer(self) -> int:
        import llama_cpp

        return int(llama_cpp.llama_model_n_layer(self.llm._model.model))

    @property
    def file_size(self) -> int:
        return self.info.file_size

    @property
    def architecture(self) -> str:
        return self.info.architecture or ""


def _with_progress_callback(
    on_progress: Callable[[float], bool], placement: Placement
) -> tuple[Callable[[], None], Any]:
    """Patch ``llama_model_default_params`` so ``Llama()`` loads with our callback and ``-dev``'s
    devices (``Llama`` takes no devices; its own keyword arguments set the other offload fields).

    Why a patch: ``Llama.__init__`` builds its ``llama_model_params`` from that
    function and exposes no hook. Returns (restore, keepalive: the callback and the C arrays).
    """
    import llama_cpp.llama_cpp as lc

    @lc.llama_progress_callback  # type: ignore[untyped-decorator]  # llama_cpp's ctypes callbacks are untyped
    def _progress(progress: float, _user_data: ctypes.c_void_p) -> bool:
        try:
            return bool(on_progress(float(progress)))
        except Exception:  # never let a Python error unwind through C
            return True

    original = lc.llama_model_default_params
    arrays: list[Any] = []  # Any: ctypes arrays

    def patched() -> Any:
        params = original()
        params.progress_callback = _progress
        params.progress_callback_user_data = None
        arrays.extend(apply_placement(lc, params, Placement(devices=placement.devices)))
        return params

    lc.llama_model_default_params = patched

    def restore() -> None:
        lc.llama_model_default_params = original

    return restore, (_progress, arrays)


def effective_n_ctx(requested: int, info: GGUFInfo) -> int:
    """``requested`` capped to the model's training context (0 = use training context).

    Why cap: a context beyond training length wastes KV-cache RAM and degrades output.
    """
    arch = info.architecture or ""
    trained = info.metadata.get(f"{arch}.context_length")
    if not isinstance(trained, int) or trained <= 0:
        return requested or 4096
    return trained if requested <= 0 else min(requested, trained)


@dataclass(frozen=True, slots=True)
class LegacyOptions:
    """The options ``llama_cpp.Llama`` takes from the worker's launch."""

    n_ctx: int
    n_threads: int
    n_threads_batch: int
    n_batch: int
    embedding: bool
    chat_format: str | None
    seed: int | None
    placement: Placement = field(default_factory=Placement)
    split_mode: int = 1  # SPLIT_MODES' layer
    main_gpu: int = 0
    offload_kqv: bool = True
    op_offload: bool = True


def load_model(
    model_path: str, options: LegacyOptions, *, log: LlamaLog, on_progress: Callable[[float], bool]
) -> LoadedModel:
    """Pre-check, then load; raises :class:`LoadError`. Call on the thread that will own the model."""
    # gguf and numpy (~60 ms): the batch engine's path to ready never loads them
    from workers.inference.llama._gguf_check import GGUFCheckError, inspect_gguf

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

    log.mark()
    kwargs = _llama_kwargs(info, options)
    restore, keepalive = _with_progress_callback(progress, options.placement)
    try:
        llm = llama_cpp.Llama(model_path, **kwargs)
    except LoadError:
        raise  # -dev named a device this build lacks
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
        used={
            **model_params_used(llama_cpp, llm.model_params, options.placement),
            **context_params_used(llm.context_params),
        },
    )


def _llama_kwargs(info: GGUFInfo, options: LegacyOptions) -> dict[str, Any]:  # Any: Llama's keyword arguments
    """``llama_cpp.Llama``'s keyword arguments for this model and these settings."""
    import llama_cpp

    kwargs: dict[str, Any] = dict(  # Any: Llama's keyword arguments
        n_ctx=effective_n_ctx(options.n_ctx, info),
        n_threads=options.n_threads,
        n_threads_batch=options.n_threads_batch,
        n_batch=options.n_batch,
        embedding=options.embedding,
        chat_format=options.chat_format,
        verbose=False,
        # -ngl: Llama turns -1 into "every layer", as llama.cpp reads any negative count
        n_gpu_layers=options.placement.n_gpu_layers,
        split_mode=options.split_mode,
        main_gpu=options.main_gpu,
        tensor_split=list(options.placement.tensor_split) or None,
        offload_kqv=options.offload_kqv,
        op_offload=options.op_offload,
    )
    if options.seed is not None:
        kwargs["seed"] = options.seed
    if options.embedding and f"{info.architecture}.pooling_type" not in info.metadata:
        # Generative models carry no pooling type, and llama.cpp's default
        # ("none") yields one vector per *token*; OpenAI clients expect one
        # per input, so mean-pool like most embedding models.
        kwargs["pooling_type"] = llama_cpp.LLAMA_POOLING_TYPE_MEAN
    return kwargs
