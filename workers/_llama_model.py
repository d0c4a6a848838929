"""One model and its one shared context, through llama.cpp's C API.

Why not ``llama_cpp.Llama``: it owns a single sequence, so it can serve one
request at a time. The batch engine (:mod:`workers._batch_engine`) needs one
context whose KV cache holds ``n_parallel`` sequences (``n_seq_max``), split
by sequence (see :func:`_context_params`).

Why import only ``llama_cpp.llama_cpp`` (see :func:`lowlevel`): the package's
``__init__`` also imports ``llama_cpp.llama`` and with it numpy and jinja2,
~0.3 s of CPU on the path to ready that the decode loop never uses. Chat
formatting needs them; :func:`complete_import` runs the deferred ``__init__``
on a helper thread while llama.cpp loads the model (the C call releases the GIL).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers._llama_load import LlamaLog, LoadError, classify_llama_errors

_DEFERRED = "_modelrouter_deferred_init"
MAX_SLOTS = 256  # LLAMA_MAX_SEQ
_import_lock = threading.Lock()


def lowlevel() -> Any:
    """``llama_cpp.llama_cpp`` (the ctypes bindings), without running the package ``__init__``.

    The deferred package gets the bindings' names (its ``__init__`` would
    star-import them), and llama-cpp-python's log hook (``llama_cpp._logger``,
    which calls ``llama_log_set`` on import) is imported here, once: a later
    import of ``llama_cpp.llama`` then cannot replace the worker's own log
    callback, even while a model loads.
    """
    mod = sys.modules.get("llama_cpp.llama_cpp")
    if mod is not None:
        return mod
    with _import_lock:
        if "llama_cpp" not in sys.modules:
            spec = importlib.util.find_spec("llama_cpp")
            if spec is None or spec.loader is None:
                raise ImportError("llama-cpp-python is not installed")
            pkg = importlib.util.module_from_spec(spec)
            setattr(pkg, _DEFERRED, spec)
            sys.modules["llama_cpp"] = pkg
            bindings = importlib.import_module("llama_cpp.llama_cpp")
            pkg.__dict__.update({k: v for k, v in vars(bindings).items() if not k.startswith("_")})
            importlib.import_module("llama_cpp._logger")
        return importlib.import_module("llama_cpp.llama_cpp")


def complete_import() -> None:
    """Run ``llama_cpp/__init__`` if :func:`lowlevel` deferred it, then import the chat formats.

    Idempotent and thread-safe; may run while a model loads (see :func:`lowlevel`).
    """
    with _import_lock:
        pkg = sys.modules.get("llama_cpp")
        spec = getattr(pkg, _DEFERRED, None) if pkg is not None else None
        if pkg is not None and spec is not None:
            delattr(pkg, _DEFERRED)
            spec.loader.exec_module(pkg)
    importlib.import_module("llama_cpp.llama_chat_format")


@dataclass(frozen=True)
class ContextConfig:
    """Context parameters; ``n_ctx`` is per slot: 0 = the model's training context, larger values are capped."""

    n_ctx: int = 4096
    n_parallel: int = 4
    n_batch: int = 512
    n_threads: int = 1
    n_threads_batch: int = 1
    warmup: bool = True


class LlamaModel:
    """A loaded model, its vocabulary and one context with ``n_parallel`` sequences.

    Not thread-safe for decoding (one engine thread owns :meth:`decode`), but
    tokenizing and reading pieces are safe from any thread: llama.cpp's
    vocabulary is read-only after load (llama-server tokenizes in its HTTP
    threads too).
    """

    def __init__(self, lc: Any, model: Any, ctx: Any, cfg: ContextConfig, path: str) -> None:
        self.lc = lc
        self.model = model
        self.ctx = ctx
        self.cfg = cfg
        self.path = path
        self.vocab = lc.llama_model_get_vocab(model)
        self.mem = lc.llama_get_memory(ctx)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.vocab))
        self.n_ctx = int(lc.llama_n_ctx_seq(ctx))  # per slot
        self.n_swa = int(lc.llama_model_n_swa(model))
        self.n_ctx_train = int(lc.llama_model_n_ctx_train(model))
        self.n_batch = int(lc.llama_n_batch(ctx))
        self.n_params = int(lc.llama_model_n_params(model))
        self.vocab_type = int(lc.llama_vocab_type(self.vocab))
        self.bos = int(lc.llama_vocab_bos(self.vocab))
        self.eos = int(lc.llama_vocab_eos(self.vocab))
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        self.add_eos = bool(lc.llama_vocab_get_add_eos(self.vocab))
        self.architecture = self.meta("general.architecture") or ""
        self._pieces: list[bytes | None] = [None] * self.n_vocab
        self._eog: dict[int, bool] = {}
        self._buf = ctypes.create_string_buffer(256)

    # -- metadata and vocabulary ------------------------------------------------

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text, or None."""
        buf = ctypes.create_string_buffer(512)
        n = self.lc.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            self.lc.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self, name: str | None = None) -> str | None:
        raw = self.lc.llama_model_chat_template(self.model, name.encode() if name else None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def token_text(self, token: int) -> str:
        """The vocabulary entry as stored (SentencePiece ``▁`` markers and all)."""
        raw = self.lc.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def token_attr(self, token: int) -> int:
        return int(self.lc.llama_vocab_get_attr(self.vocab, token))

    def is_eog(self, token: int) -> bool:
        """End of generation (EOS, EOT, ...), cached per token seen."""
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(self.lc.llama_vocab_is_eog(self.vocab, token))
        return eog

    def piece(self, token: int) -> bytes:
        """The bytes a generated token adds to the text (control tokens render as nothing), cached."""
        cached = self._pieces[token]
        if cached is None:
            n = self.lc.llama_token_to_piece(self.vocab, token, self._buf, len(self._buf), 0, False)
            cached = self._buf.raw[: max(n, 0)]
            self._pieces[token] = cached
        return cached

    def tokenize_whole(self, data: bytes, *, add_special: bool, parse_special: bool) -> list[int]:
        """One ``llama_tokenize`` call (see :mod:`workers._tokenize` for long texts)."""
        cap = len(data) + 16
        out = (self.lc.llama_token * cap)()
        n = self.lc.llama_tokenize(self.vocab, data, len(data), out, cap, add_special, parse_special)
        if n < 0:  # more tokens than bytes + 16: only with exotic vocabularies
            cap = -n
            out = (self.lc.llama_token * cap)()
            n = self.lc.llama_tokenize(self.vocab, data, len(data), out, cap, add_special, parse_special)
        if n < 0:
            raise RuntimeError(f"llama_tokenize failed ({n})")
        return list(out[:n])

    # -- KV cache ---------------------------------------------------------------

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> bool:
        """Drop positions ``[p0, p1)`` of sequence ``seq`` (``p1`` -1 = to the end)."""
        return bool(self.lc.llama_memory_seq_rm(self.mem, seq, p0, p1))

    def can_continue(self, seq: int, n_keep: int) -> bool:
        """Whether ``seq`` can resume at position ``n_keep``: its sliding window must still be cached."""
        if self.n_swa <= 0 or n_keep <= 0:
            return True
        return int(self.lc.llama_memory_seq_pos_min(self.mem, seq)) <= max(0, n_keep - self.n_swa)

    def close(self) -> None:
        if self.ctx:
            self.lc.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self.lc.llama_model_free(self.model)
            self.model = None


class Batch:
    """A reusable ``llama_batch`` of up to ``capacity`` tokens, one sequence id each (the engine's step)."""

    def __init__(self, lc: Any, capacity: int) -> None:
        self.lc = lc
        self.capacity = capacity
        self.raw = lc.llama_batch_init(capacity, 0, 1)
        self._tok, self._pos, self._nseq = self.raw.token, self.raw.pos, self.raw.n_seq_id
        self._sid, self._logits = self.raw.seq_id, self.raw.logits
        self.n = 0

    def add(self, tokens: list[int], pos0: int, seq: int, logits_last: bool) -> int:
        """Append ``tokens`` at positions ``pos0..``; returns the row of the last one."""
        tok, pos, nseq, sid, lg = self._tok, self._pos, self._nseq, self._sid, self._logits
        i = self.n
        for k, t in enumerate(tokens):
            tok[i + k] = t
            pos[i + k] = pos0 + k
            nseq[i + k] = 1
            sid[i + k][0] = seq
            lg[i + k] = 0
        self.n = i + len(tokens)
        if logits_last:
            lg[self.n - 1] = 1
        return self.n - 1

    def decode(self, ctx: Any) -> int:
        self.raw.n_tokens = self.n
        return int(self.lc.llama_decode(ctx, self.raw))

    def free(self) -> None:
        self.lc.llama_batch_free(self.raw)


def _progress_callback(lc: Any, on_progress: Callable[[float], bool]) -> Any:
    @lc.llama_progress_callback  # type: ignore[untyped-decorator]  # ctypes CFUNCTYPE factories have no stubs
    def _progress(progress: float, _user_data: ctypes.c_void_p) -> bool:
        try:
            return bool(on_progress(float(progress)))
        except Exception:  # never let a Python error unwind through C
            return True

    return _progress


def _classify(path: str, log: LlamaLog, aborted: bool) -> LoadError:
    """Why the load failed: a stop request, a structural defect, or llama.cpp's own words.

    The GGUF header walk runs only after a failure: it imports the ``gguf``
    package (with numpy, ~60 ms) that a good load does not need.
    """
    if aborted:
        return LoadError("aborted", "load aborted by a stop request")
    from workers._gguf_check import GGUFCheckError, inspect_gguf

    try:
        inspect_gguf(path)
    except GGUFCheckError as exc:
        return LoadError(exc.reason, exc.message)
    return classify_llama_errors(log.errors())


def _context_params(lc: Any, cfg: ContextConfig, n_ctx_train: int) -> Any:
    """One KV stream per slot, each ``cfg.n_ctx`` cells (llama-server's ``-np N`` without ``--kv-unified``).

    Why split: a sequence alone in its stream keeps its cells in position
    order, so its attention sums in the same order whatever the other slots
    do, and greedy output equals the same request run alone. In one unified
    pool, cells freed by a finished or cancelled request are refilled out of
    order and results drift in the last bits. It also means no slot can take
    another's cells. The cost: ``n_parallel`` times the KV memory of one
    ``n_ctx`` context.
    """
    p = lc.llama_context_default_params()
    per_slot = n_ctx_train if cfg.n_ctx <= 0 else min(cfg.n_ctx, n_ctx_train or cfg.n_ctx)
    n_seq = min(max(1, cfg.n_parallel), MAX_SLOTS)
    p.n_ctx = per_slot * n_seq
    # A step carries one token per generating slot even when n_batch is smaller.
    p.n_batch = max(cfg.n_batch, n_seq)
    p.n_ubatch = min(p.n_batch, 512)
    p.n_seq_max = n_seq
    p.n_threads = cfg.n_threads
    p.n_threads_batch = cfg.n_threads_batch
    p.kv_unified = False
    # Sliding-window layers keep only their window (Gemma 3: 512 of 4096 per slot);
    # prefix reuse checks that the window it needs is still cached.
    p.swa_full = False
    p.no_perf = True
    return p


@dataclass(frozen=True)
class LoadedLlama:
    """A loaded model plus what ``instance_ready`` reports; ``phases`` are milliseconds per step."""

    llm: LlamaModel
    load_ms: float
    phases: dict[str, float]

    @property
    def n_ctx(self) -> int:
        return self.llm.n_ctx

    @property
    def n_params(self) -> int:
        return self.llm.n_params

    @property
    def file_size(self) -> int:
        return os.path.getsize(self.llm.path)

    @property
    def architecture(self) -> str:
        return self.llm.architecture


def load_llama(path: str, cfg: ContextConfig, *, log: LlamaLog, on_progress: Callable[[float], bool]) -> LoadedLlama:
    """Load ``path`` and create its context; raises :class:`LoadError` with a classified reason."""
    marks = [time.monotonic()]
    if not os.path.exists(path):
        raise LoadError("file_missing", f"no such file: {path}")
    lc = lowlevel()
    lc.llama_backend_init()
    marks.append(time.monotonic())
    model = _load_model(lc, path, log, on_progress)
    marks.append(time.monotonic())
    ctx = lc.llama_init_from_model(model, _context_params(lc, cfg, int(lc.llama_model_n_ctx_train(model))))
    if not ctx:
        lc.llama_model_free(model)
        err = classify_llama_errors(log.errors())
        raise LoadError(err.reason if err.reason != "load_error" else "out_of_memory", err.message)
    marks.append(time.monotonic())
    llm = LlamaModel(lc, model, ctx, cfg, path)
    marks.append(time.monotonic())
    if cfg.warmup:
        _warmup(llm)
    marks.append(time.monotonic())
    on_progress(1.0)
    names = ("bindings_ms", "model_ms", "context_ms", "vocab_ms", "warmup_ms")
    phases = {name: round((b - a) * 1000.0, 3) for name, (a, b) in zip(names, itertools.pairwise(marks), strict=True)}
    return LoadedLlama(llm, round((marks[-1] - marks[0]) * 1000.0, 3), phases)


def _load_model(lc: Any, path: str, log: LlamaLog, on_progress: Callable[[float], bool]) -> Any:
    """``llama_model_load_from_file`` with our progress callback (returning False aborts the load)."""
    aborted = threading.Event()

    def progress(p: float) -> bool:
        keep = on_progress(p)
        if not keep:
            aborted.set()
        return keep

    params = lc.llama_model_default_params()
    params.progress_callback = keepalive = _progress_callback(lc, progress)
    log.mark()
    model = lc.llama_model_load_from_file(path.encode(), params)
    del keepalive  # referenced until here: llama.cpp calls it only while loading
    if not model:
        raise _classify(path, log, aborted.is_set())
    return model


def _warmup(llm: LlamaModel) -> None:
    """Decode one token and forget it, as llama-server does before it reports ready.

    Why: the first ``llama_decode`` allocates the compute graph and faults in
    the weights; without this the first request's time to first token pays
    it (~40 ms on Gemma 3 270M).
    """
    lc = llm.lc
    token = llm.bos if llm.bos >= 0 else 0
    batch = lc.llama_batch_get_one((lc.llama_token * 1)(token), 1)
    lc.llama_decode(llm.ctx, batch)
    lc.llama_synchronize(llm.ctx)
    lc.llama_memory_clear(llm.mem, True)
