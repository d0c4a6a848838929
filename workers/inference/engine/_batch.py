"""The batch engine: ``n_parallel`` slots decoded together, one ``llama_decode`` per step.

Why: ``llama_cpp.Llama`` serves one request at a time, while a batch of
several sequences costs little more than one on a CPU (the weights are read
once per step). Each step, on the single engine thread:

1. release cancelled requests (client gone, stop): their cells go at once;
2. admit queued requests into idle slots, reusing the longest cached prefix (``_admission``);
3. build one batch: the pending token of every generating slot, then prompt
   chunks of prefilling slots up to ``n_batch`` tokens in all (chunked
   prefill: a long prompt takes several steps and never stalls the others;
   an image in a prompt is decoded by itself first, :mod:`~workers.inference.engine._media`);
4. ``llama_decode``; then sample each row that has logits with its request's chain (rows shared out over
   the compute threads: ``_row_sampler``) and hand the text to the request's queue. Slots whose LoRA adapter
   sets differ (a request's ``lora``) are never in one batch, as in llama-server: 3 and 4 run per set.

A request that arrives while a step runs joins at the next one (continuous batching). Python work per
step is a few list operations per slot; sampling runs in C. HTTP threads only enqueue
:class:`~workers.inference.engine.Request` objects and read their queues (:mod:`workers.inference.http.server._front`).

KV cells: one pool for all slots, or a stream each (:func:`workers.inference.llama._load._context_params`). An idle
slot keeps its prompt and reply for reuse until the RAM prompt cache takes them (``_prompt_cache``); a cancelled
request's cells are dropped at once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.inference.engine._admission import AdmissionMixin
from workers.inference.engine._compaction import CompactionMixin
from workers.inference.engine._disk_cache import DiskCacheMixin
from workers.inference.engine._draft_model import load_draft
from workers.inference.engine._embed import EmbeddingLane, EmbeddingMixin, EmbedRequest
from workers.inference.engine._errors import EngineError, EngineFailed, EngineNotReady, EngineStopping, RequestCancelled
from workers.inference.engine._kept_logits import KeptLogits
from workers.inference.engine._media import decode_reached_media
from workers.inference.engine._metrics import EngineMetrics, EngineMonitorMixin, StepLog
from workers.inference.engine._prompt_cache import DEFAULT_CACHE_RAM_MIB, PromptCache
from workers.inference.engine._protocol import FrontFactory, JobRunner
from workers.inference.engine._row_sampler import RowSampler
from workers.inference.engine._slot_files import SlotAction, SlotActionsMixin
from workers.inference.engine._slots import Request, Slot, lora_sets
from workers.inference.engine._speculate import check_rollback
from workers.inference.engine._step import StepMixin
from workers.inference.engine._step_clock import StepClock
from workers.inference.engine._views import Heartbeat
from workers.inference.llama import MAX_SLOTS, Batch, LlamaModel, LoadError, LoraKey, supports_gpu_offload
from workers.inference.speculative import UnsupportedSpeculation, make_speculator

if TYPE_CHECKING:
    from service.core.launch_speculative import SpeculativeOptions
    from workers.inference.engine._job import Job
    from workers.inference.llama import Loaded


class BatchEngine(
    EngineMonitorMixin, EmbeddingMixin, SlotActionsMixin, AdmissionMixin, DiskCacheMixin, CompactionMixin, StepMixin
):
    """Loads the model on its own thread, then runs the step loop until drained (an
    :class:`~workers.inference.engine.Engine`: ``n_parallel`` slots, live state, a request front)."""

    def __init__(
        self,
        model_name: str,
        *,
        n_parallel: int = 4,
        embedding: bool = False,
        context_shift: bool = False,
        cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB,
        cache_idle_slots: bool = True,
        speculative: SpeculativeOptions | None = None,
    ) -> None:
        self.model_name = model_name
        self.cache_ram_mib, self.cache_idle_slots = cache_ram_mib, cache_idle_slots  # --cache-ram, --cache-idle-slots
        self.prompt_cache: PromptCache | None = None  # made in _setup unless --cache-ram 0
        self.n_parallel = max(1, n_parallel)
        self.speculative = speculative  # --spec-type and its drafters' options: the speculator made at load
        self.llm: LlamaModel | None = None
        self.slots: list[Slot] = []
        self.metrics = EngineMetrics()
        self.embedding_enabled = embedding  # --embedding: the model's own context pools embeddings
        self.context_shift = context_shift  # --context-shift: a full context drops old tokens, generation goes on
        self._lane: EmbeddingLane | None = None  # made on the engine thread (a second context if needed)
        self._embeds: deque[EmbedRequest] = deque()
        self._actions: deque[SlotAction] = deque()  # slot save/restore/erase, run between steps
        self.force_cancel = False  # plain attribute: set from a signal handler
        self.front: JobRunner | None = None  # the request front, set once loaded
        self._cv = threading.Condition()
        self._pending: deque[Request] = deque()
        self._accepting = self._drained = False
        self._idle = threading.Event()
        self._idle.set()
        self._batch: Batch | None = None
        self._budget = 0  # prompt tokens per step; halved while the KV cache cannot take a batch
        self._gen_cap, self._gen_waiting = 0, set()  # generating slots per step, likewise (_step)
        self.kept = KeptLogits()  # per slot, the logits after its cached tokens (exact repeats)
        self.sampler = RowSampler(None, 1, 0)  # a step's rows on the compute threads (made in _setup)
        self.step_log = StepLog()  # GET /engine/steps
        self.clock = StepClock()  # GET /engine/heartbeat: the service's liveness check
        self._loop_done = threading.Event()  # the engine thread left its loop: the context is the caller's

    # -- capabilities -------------------------------------------------------------

    @property
    def slot_count(self) -> int:
        return len(self.slots)

    @property
    def monitor(self) -> BatchEngine:
        return self  # slots_json, steps_json, metrics_text, stats

    @property
    def has_front(self) -> bool:
        return True

    def cancel_running(self) -> None:
        self.force_cancel = True  # read by the next step; no lock: this may run in a signal handler

    def heartbeat(self) -> Heartbeat:
        """The engine's progress (:class:`StepClock`); read without the lock, so a hung step cannot block it."""
        return self.clock.beat(len(self._pending) + sum(1 for s in self.slots if s.is_processing))

    # -- lifecycle ----------------------------------------------------------------

    def start(
        self,
        load: Callable[[], Loaded],
        on_loaded: Callable[[Loaded], bool],
        on_failed: Callable[[BaseException], None],
        make_front: FrontFactory,
    ) -> None:
        """Run ``load()`` (returning a loaded model with ``.llm``) on the engine thread, then serve."""

        def run() -> None:
            try:
                loaded = load()
                self._setup(loaded.llm)
                self.front = make_front(self, loaded.llm)
            except BaseException as exc:  # reported, then the process exits
                on_failed(exc)
                return
            self._restore_from_disk()
            with self._cv:
                # Open before on_loaded records instance_ready: a client that saw the
                # event at once (modelrouter run) must not get a 503 in between.
                self._accepting = not self._drained
            accept = on_loaded(loaded)
            with self._cv:
                self._accepting = accept and not self._drained
            try:
                if self._accepting:
                    self._serve()
            finally:
                self._loop_done.set()

        threading.Thread(target=run, name="inference", daemon=True).start()

    def _restore_from_disk(self) -> None:
        """The saved prompt cache (``--prompt-cache-dir``) before ready; a failure costs only the cache."""
        try:
            self.restore_at_load()
        except Exception as exc:  # the files are an optimisation: serving goes on without them
            if self.disk is not None:
                self.disk.log("prompt_cache_restore_failed", error=repr(exc))

    def persist(self, timeout: float = 2.0) -> None:
        """At a planned stop, after :meth:`drain`: save the prompt cache once the engine thread has left
        its loop (never while it could still touch the context)."""
        if self.disk is None or not self._loop_done.wait(timeout):
            return
        try:
            self.persist_prompt_cache()
        except Exception as exc:  # a failed save must not turn a stop into a crash
            self.disk.log("prompt_cache_save_failed", error=repr(exc))

    def _setup(self, llm: LlamaModel) -> None:
        self.llm = llm
        self.slots = [Slot(id=i, n_ctx=llm.n_ctx) for i in range(min(self.n_parallel, MAX_SLOTS))]
        self._batch = Batch(llm.lc, llm.n_batch)
        self._budget = llm.cfg.n_batch
        self.kept.lc, self.kept.n_vocab = llm.lc, llm.n_vocab
        self.prompt_cache = PromptCache(self.cache_ram_mib, llm.n_ctx) if self.cache_ram_mib and llm.mem else None
        if self.prompt_cache is not None and self.cache_idle_slots:
            self._debug("__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__")  # llama-server's line: idle slots go to the cache
        self.sampler = RowSampler(llm.lc, llm.cfg.n_threads, llm.n_vocab)
        self._setup_compaction(llm)
        if self.speculative is not None:
            self._setup_speculation(llm, self.speculative)

    def _setup_speculation(self, llm: LlamaModel, options: SpeculativeOptions) -> None:
        """The drafters ``--spec-type`` asks for (a draft model loaded beside the target); one that cannot
        run here fails the load with the reason."""
        try:
            uses_draft = "draft-simple" in options.spec_type.split(",")
            draft = load_draft(options, llm, len(self.slots), None) if uses_draft else None
            self.speculator = make_speculator(options, len(self.slots), draft)
            if self.speculator is not None:
                check_rollback(llm)
            self._on_cpu = not supports_gpu_offload() or llm.cfg.placement.n_gpu_layers == 0
        except UnsupportedSpeculation as exc:
            raise LoadError("speculative_decoding", str(exc)) from None
        synthetic = self.speculator.synthetic if self.speculator is not None else None
        if synthetic is not None:  # llama.cpp's two lines
            rates = ", ".join(f"{r:.6g}" for r in synthetic.rates)
            self._debug("synthetic speculative acceptance is enabled for benchmarking; generated output is not valid")
            n_max, mean = len(synthetic.rates), synthetic.mean_length
            self._debug(f"synthetic acceptance: n_max = {n_max}, mean length = {mean:.6f}, rates = [{rates}]")
        for s in self.slots:
            s.spec_types = options.spec_type if self.speculator is not None else "none"

    def submit(self, job: Job) -> None:
        """Run an HTTP job through the request front (raises :class:`EngineNotReady` before load and once draining)."""
        if self.front is None or not self._accepting:
            raise EngineNotReady()
        self.front.run_job(job)

    def enqueue(self, req: Request) -> None:
        """Queue a request for the next step; raises :class:`EngineNotReady` once the engine drains."""
        with self._cv:
            if not self._accepting:
                raise EngineNotReady()
            self._pending.append(req)
            self._idle.clear()
            self._cv.notify()

    def cancel(self, req: Request) -> None:
        """Cancel ``req``: it leaves its slot at the next step (or the queue at once)."""
        req.cancelled.set()
        with self._cv:
            self._cv.notify()

    def drain(self, grace_s: float) -> None:
        """Stop accepting, reject queued requests, give running ones ``grace_s``, then cancel them."""
        with self._cv:
            self._accepting = False
            self._drained = True
            while self._pending:
                self._reject(self._pending.popleft(), EngineStopping())
            while self._embeds:
                self._embeds.popleft().out.put(("e", EngineStopping()))
            self._cv.notify()
        if not self._idle.wait(grace_s):
            self.force_cancel = True
            with self._cv:
                self._cv.notify()
            self._idle.wait(2.0)

    # -- the engine thread ----------------------------------------------------------

    def _serve(self) -> None:
        while True:
            with self._cv:
                while not self._has_work():
                    self._idle.set()
                    if self._drained:
                        return
                    self._cv.wait()
            self.clock.begin()
            try:
                self._step()
            except Exception as exc:  # a bug must not leave clients waiting forever
                self._fail_active(EngineFailed(f"inference failed: {exc!r}"))
            finally:
                self.clock.end()

    def _has_work(self) -> bool:
        if any(s.is_processing for s in self.slots):
            return True
        lane_busy = self._lane is not None and bool(self._lane.pending)
        due = self._pending or self._embeds or lane_busy or self._actions or self._disk_due
        return bool(due) and not self._drained

    def _step(self) -> None:
        now = time.monotonic()
        self._release_cancelled(now)
        if self._actions:
            self._run_slot_actions()
        if self._disk_due:
            self._restore_due()
        assert self.llm is not None
        lora = self.llm.lora
        if self._embeds or (self._lane is not None and self._lane.pending):
            if lora.adapters:
                lora.use(self.llm.lc, self.llm.ctx, lora.key)  # embeddings decode with the worker's own set
            self._embed_step(now)
        self._admit(now)
        self._compact_slots()
        if self.embedding_enabled:
            self.llm.set_embeddings(False)  # logits for the generating slots
        sets: list[LoraKey | None] = [*lora_sets(self.slots)] if lora.adapters else []
        decoded: list[int] = []
        prefilled: list[list[int]] = []
        rows = 0
        for key in sets or [None]:  # one llama_decode per adapter set: one, usually
            if key is not None:
                lora.use(self.llm.lc, self.llm.ctx, key)  # nothing to do when the context has it already
            ids, chunks, n = self._decode(key if len(sets) > 1 else None)
            decoded.extend(ids)
            prefilled.extend(chunks)
            rows += n
        if decoded or prefilled:
            with self._cv:  # steps_json copies the log from an HTTP thread
                self.step_log.add(decoded, prefilled, rows)

    def _decode(self, lora: LoraKey | None) -> tuple[list[int], list[list[int]], int]:
        """One ``llama_decode`` of the slots with adapter set ``lora`` (None: every slot), then sampling;
        answers what the step log records of it (request ids decoded, prompt chunks prefilled, rows)."""
        batch = self._batch
        assert batch is not None and self.llm is not None
        if self.llm.projector is not None:  # images first, each decoded by itself (engine._media)
            slots = self.slots if lora is None else [s for s in self.slots if s.lora == lora]
            decode_reached_media(self.llm, slots, self._fail, self.metrics)
        batch.n = 0
        gen, chunks = self._fill(batch, lora)
        if batch.n == 0:  # nothing to decode (a cap left nothing either: the next step starts afresh)
            self._budget, self._gen_cap = self.llm.cfg.n_batch, 0
            return [], [], 0
        t_decode = time.monotonic()
        ret = batch.decode(self.llm.ctx)
        if ret != 0:
            self._decode_failed(ret, gen, chunks)
            return [], [], 0
        self._budget, self._gen_cap = self.llm.cfg.n_batch, 0
        n_prompt = sum(len(part) for _, part in chunks)
        if n_prompt:  # timed once the compute is done (a GPU's decode returns before), as llama-server
            self.llm.lc.llama_synchronize(self.llm.ctx)
        now = time.monotonic()
        self.metrics.on_prompt(n_prompt, now - t_decode)
        busy = sum(s.is_processing for s in self.slots)  # before _commit ends any
        decoded = [s.request.id for s in gen if s.request is not None]
        prefilled = [[s.request.id, len(s.request.feed), len(part)] for s, part in chunks if s.request]
        self._commit(gen, chunks, now)
        self.metrics.on_decode(busy, max(len(s.cache) for s in self.slots))
        return decoded, prefilled, batch.n

    # -- admission and release ------------------------------------------------------

    def _release_cancelled(self, now: float) -> None:
        for s in self.slots:
            req = s.request
            if req is not None and (req.cancelled.is_set() or self.force_cancel):
                self._release(s, now, keep_cache=False)
                self._reject(req, RequestCancelled("request cancelled"))
        if self.force_cancel:
            with self._cv:
                while self._pending:
                    self._reject(self._pending.popleft(), EngineStopping())

    def _release(self, slot: Slot, now: float, *, keep_cache: bool) -> None:
        assert self.llm is not None
        req = slot.request
        if req is not None and req.chain is not None:
            self.llm.lc.llama_sampler_free(req.chain)
            req.chain = None
        if req is not None:
            self.step_log.ended(req.id)
            self.metrics.on_release(slot.timings)
        if not keep_cache:  # before it shows idle: /slots never sees an idle slot with cells about to go
            self._drop_cache(slot)
        with self._cv:
            slot.end(now)

    def _reject(self, req: Request, err: EngineError) -> None:
        if req.chain is not None and self.llm is not None:
            self.llm.lc.llama_sampler_free(req.chain)
            req.chain = None
        req.out.put(("e", err))

    def _fail_active(self, err: EngineError) -> None:
        for s in self.slots:
            self._fail(s, err)

    def _fail(self, s: Slot, err: EngineError) -> None:
        """End the slot's request with ``err`` and drop its cells."""
        if s.request is not None:
            self._reject(s.request, err)
            self._release(s, time.monotonic(), keep_cache=False)

    def end_reasoning(self, cmpl_id: str) -> str | None:
        """llama-server's ``reasoning_end`` control (any thread): ends the reasoning of the running
        completion ``cmpl_id`` at its next token; None once asked, else llama-server's reason why not.
        A queued one counts as running: its client may have its id already (a chat's first chunk)."""
        with self._cv:
            running = [s.request for s in self.slots if s.request is not None] + list(self._pending)
            req = next((r for r in running if cmpl_id and r.cmpl_id == cmpl_id), None)
        if req is None:
            return "no active completion for this id"
        if req.reasoning is None:
            return "reasoning control not enabled for this completion"
        req.reasoning.ask_end()
        return None
