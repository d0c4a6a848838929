"""One model and its one shared context, through llama.cpp's C API.

Why not ``llama_cpp.Llama``: it owns a single sequence, so it can serve one
request at a time. The batch engine (:mod:`workers.inference.engine._batch`) needs one
context whose KV cache holds ``n_parallel`` sequences (``n_seq_max``), split
by sequence (see :func:`workers.inference.llama._load._context_params`).
:class:`LlamaModel` reads the vocabulary and edits the KV cache; :class:`Batch`
is the engine's reusable ``llama_batch``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from service.core import launch_rows as rows
from workers.inference.llama._lora import LoraSet
from workers.inference.llama._offload import Placement

MAX_SLOTS = 256  # LLAMA_MAX_SEQ
# llama.cpp's enums by option value: one table, the launch's (service.core.launch_rows)
CACHE_TYPES, POOLING, FLASH_ATTN = rows.CACHE_TYPES, rows.POOLING, rows.FLASH_ATTN
ROPE_SCALING, LOAD_MODES, LAZY_MODES = rows.ROPE_SCALING, rows.LOAD_MODES, rows.LAZY_MODES


@dataclass(frozen=True)
class ContextConfig:
    """Context parameters; ``n_ctx`` is the whole context (llama-server's ``-c``: 0 = the model's
    training context), shared out as ``n_ctx / n_parallel`` per slot unless ``kv_unified``."""

    n_ctx: int = 4096
    n_parallel: int = 4
    n_batch: int = 512
    n_threads: int = 1
    n_threads_batch: int = 1
    warmup: bool = True
    embedding: bool = False  # --embedding: the context computes pooled embeddings too
    pooling: int = -1  # POOLING value, -1: the model's
    kv_unified: bool = False  # one KV pool for every slot (--kv-unified) instead of a stream each
    n_ubatch: int = 512  # -ub: the physical batch (embeddings: n_batch, a sequence in one micro-batch)
    flash_attn: int = -1  # FLASH_ATTN value (-fa); llama.cpp resolves auto
    type_k: int = 1  # CACHE_TYPES value (-ctk), f16
    type_v: int = 1  # CACHE_TYPES value (-ctv), f16
    swa_full: bool = False  # --swa-full: sliding-window layers keep every cell, as the others
    rope: tuple[tuple[str, float], ...] = ()  # llama_context_params fields the options set (--rope-*, --yarn-*...)
    model: tuple[tuple[str, int], ...] = ()  # llama_model_params fields set (--load-mode, --no-repack, ...)
    placement: Placement = field(default_factory=Placement)  # where the layers go (-ngl, -ts, -dev)


class LlamaModel:
    """A loaded model, its vocabulary and one context with ``n_parallel`` sequences.

    Not thread-safe for decoding (one engine thread owns :meth:`decode`), but
    tokenizing and reading pieces are safe from any thread: llama.cpp's
    vocabulary is read-only after load (llama-server tokenizes in its HTTP
    threads too).
    """

    def __init__(
        self, lc: Any, model: Any, ctx: Any, cfg: ContextConfig, path: str, *, owns_model: bool = True
    ) -> None:
        self.lc = lc
        self._owns_model = owns_model
        self.model = model
        self.ctx = ctx
        self.cfg = cfg
        self.path = path
        self.vocab = lc.llama_model_get_vocab(model)
        self.mem = lc.llama_get_memory(ctx)  # None for encoders (BERT): no KV cache
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(lc.llama_model_n_ctx_train(model))
        # Per slot, as llama-server's n_ctx_slot: -c / n_parallel (the whole pool with --kv-unified),
        # at most the training context.
        self.n_ctx = min(int(lc.llama_n_ctx_seq(ctx)), self.n_ctx_train or 1 << 30)
        self.n_ctx_total = int(lc.llama_n_ctx(ctx))
        self.n_ubatch = int(lc.llama_n_ubatch(ctx))
        self.n_embd_out = int(lc.llama_model_n_embd_out(model))
        self.pooling = int(lc.llama_pooling_type(ctx)) if cfg.embedding else -1
        self.causal = bool(lc.llama_get_causal_attn(ctx))  # False: an encoder, it cannot generate
        self._embeddings_on = cfg.embedding
        self.n_swa = int(lc.llama_model_n_swa(model))
        self.n_batch = int(lc.llama_n_batch(ctx))
        self.n_params = int(lc.llama_model_n_params(model))
        self.vocab_type = int(lc.llama_vocab_type(self.vocab))
        self.bos = int(lc.llama_vocab_bos(self.vocab))
        self.eos = int(lc.llama_vocab_eos(self.vocab))
        self.sep = int(lc.llama_vocab_sep(self.vocab))
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        self.add_eos = bool(lc.llama_vocab_get_add_eos(self.vocab))
        self.add_sep = bool(lc.llama_vocab_get_add_sep(self.vocab))
        self.architecture = self.meta("general.architecture") or ""
        self._pieces: list[bytes | None] = [None] * self.n_vocab
        self.lora = LoraSet()  # --lora adapters, loaded after the context (engine_setup.load)
        self.projector: Any = None  # --mmproj: a llama._mtmd.Projector, attached after the context (engine_setup.load)
        self._eog: dict[int, bool] = {}
        self._eog_all: list[int] | None = None
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

    def eog_tokens(self) -> list[int]:
        """Every end-of-generation token of the vocabulary (``ignore_eos`` bans them), computed once."""
        if self._eog_all is None:
            self._eog_all = [t for t in range(self.n_vocab) if self.lc.llama_vocab_is_eog(self.vocab, t)]
        return self._eog_all

    def piece(self, token: int) -> bytes:
        """The bytes a generated token adds to the text (control tokens render as nothing), cached."""
        cached = self._pieces[token]
        if cached is None:
            n = self.lc.llama_token_to_piece(self.vocab, token, self._buf, len(self._buf), 0, False)
            cached = self._buf.raw[: max(n, 0)]
            self._pieces[token] = cached
        return cached

    def tokenize_whole(self, data: bytes, *, add_special: bool, parse_special: bool) -> list[int]:
        """One ``llama_tokenize`` call (see :mod:`workers.inference.llama._tokenize` for long texts)."""
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
        if not self.mem:
            return True  # an encoder keeps nothing between decodes
        return bool(self.lc.llama_memory_seq_rm(self.mem, seq, p0, p1))

    def seq_cp(self, src: int, dst: int) -> None:
        """Copy all of sequence ``src`` to ``dst`` (across KV streams: ``dst``'s stream is replaced,
        its buffer copied at the next decode)."""
        self.lc.llama_memory_seq_cp(self.mem, src, dst, -1, -1)

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Shift positions ``[p0, p1)`` of ``seq`` by ``delta`` (context shift)."""
        self.lc.llama_memory_seq_add(self.mem, seq, p0, p1, delta)

    def set_embeddings(self, on: bool) -> None:
        """Whether the next decode computes embeddings (pooled per sequence) or logits; llama-server
        switches the same context per batch, so one context serves both kinds of request."""
        if on != self._embeddings_on:
            self.lc.llama_set_embeddings(self.ctx, on)
            self._embeddings_on = on

    def can_continue(self, seq: int, n_keep: int) -> bool:
        """Whether ``seq`` can resume at position ``n_keep``: its sliding window must still be cached."""
        if not self.mem:
            return n_keep <= 0
        if self.n_swa <= 0 or n_keep <= 0:
            return True
        return int(self.lc.llama_memory_seq_pos_min(self.mem, seq)) <= max(0, n_keep - self.n_swa)

    def second_context_pooling(self) -> int:
        """The pooling :meth:`embedding_context` uses: the GGUF's, else ``mean``."""
        own = self.meta(f"{self.architecture}.pooling_type")
        return int(own) if own and own.isdigit() and int(own) > 0 else POOLING["mean"]

    def embedding_context(self) -> LlamaModel:
        """A second context on the same weights that computes pooled embeddings, for a model
        loaded without ``--embedding`` (Ollama serves embeddings from any model).

        Why a second context rather than switching this one: a context's pooling is fixed
        when it is created, and a generative model's own is usually ``none`` (a vector per
        token), which OpenAI's shape cannot carry; this one pools ``mean`` unless the GGUF
        names a pooling. Its cells only live for one decode (a request's tokens are dropped
        as soon as its vector is read), so it holds ``n_batch`` cells in one pool.
        """
        pooling = self.second_context_pooling()
        n = max(self.cfg.n_batch, self.cfg.n_parallel)
        cfg = ContextConfig(
            n_ctx=n,
            n_parallel=self.cfg.n_parallel,
            n_batch=n,
            n_threads=self.cfg.n_threads,
            n_threads_batch=self.cfg.n_threads_batch,
            warmup=False,
            embedding=True,
            pooling=pooling,
            kv_unified=True,
        )
        p = self.lc.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n, n, n, min(max(1, cfg.n_parallel), MAX_SLOTS)
        p.n_threads, p.n_threads_batch = cfg.n_threads, cfg.n_threads_batch
        p.kv_unified, p.embeddings, p.pooling_type, p.no_perf = True, True, pooling, True
        ctx = self.lc.llama_init_from_model(self.model, p)
        if not ctx:
            raise RuntimeError("could not create an embedding context (out of memory?)")
        return LlamaModel(self.lc, self.model, ctx, cfg, self.path, owns_model=False)

    def close(self) -> None:
        if self.projector is not None:
            self.projector.close()
            self.projector = None
        if self.ctx:
            self.lc.llama_free(self.ctx)
            self.ctx = None
        if self.model and self._owns_model:
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

    def add(self, tokens: list[int], pos0: int, seq: int, logits_last: bool, *, outputs: bool = False) -> int:
        """Append ``tokens`` at positions ``pos0..``; returns the row of the last one
        (``outputs``: every row is an output, as pooled embeddings need)."""
        tok, pos, nseq, sid, lg = self._tok, self._pos, self._nseq, self._sid, self._logits
        i = self.n
        flag = 1 if outputs else 0
        for k, t in enumerate(tokens):
            tok[i + k] = t
            pos[i + k] = pos0 + k
            nseq[i + k] = 1
            sid[i + k][0] = seq
            lg[i + k] = flag
        self.n = i + len(tokens)
        if logits_last:
            lg[self.n - 1] = 1
        return self.n - 1

    def decode(self, ctx: Any) -> int:
        self.raw.n_tokens = self.n
        return int(self.lc.llama_decode(ctx, self.raw))

    def free(self) -> None:
        self.lc.llama_batch_free(self.raw)
