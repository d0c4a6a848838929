"""The single inference thread that owns the ``llama_cpp.Llama`` object.

Why one thread: ``Llama`` is not thread-safe (one KV cache, one sampler),
and its streaming generators must be advanced on one thread. HTTP handler
threads therefore never touch the model: they enqueue a :class:`Job` on a
FIFO queue and read results from the job's own queue. Requests run strictly
in arrival order; a slow client cannot corrupt anything, only wait.

Cancellation (client disconnected mid-stream, or a stop that outlived its
grace period) is cooperative: a logits processor forces the end-of-sequence
token on the next sampling step, so generation ends within one token.
"""

from __future__ import annotations

import base64
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workers.inference.engine._errors import EngineNotReady, EngineStopping, RequestCancelled, RequestRejected
from workers.inference.engine._finished import FinishedLog, log_finished
from workers.inference.engine._job import END, Job
from workers.inference.engine._slots import Timings
from workers.inference.engine._step_clock import StepClock
from workers.inference.engine._views import Heartbeat

LlamaAnswer = dict[str, Any]
"""An answer, stream chunk or ``usage`` of ``llama_cpp.Llama`` (its own TypedDicts, one per call kind, are
untyped to mypy here): free-form, passed on as it came; only ``id``, ``finish_reason``, the token counts and
an embedding's ``data`` are read."""

if TYPE_CHECKING:
    from workers.inference.engine._protocol import FrontFactory
    from workers.inference.llama import Loaded


class LegacyEngine:
    """Loads the model on its own thread, then serves :class:`Job` s FIFO.

    An :class:`~workers.inference.engine.Engine` with one slot, no live state and no
    request front (``llama_cpp.Llama`` formats chats itself); it serves embeddings
    when loaded with ``--embedding``.
    """

    def __init__(self, model_name: str, *, embedding: bool = False) -> None:
        self.model_name = model_name
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._current: Job | None = None
        self._accepting = False
        self._drained = False
        self._llm: Any = None
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self.embedding_enabled = embedding
        # Set (plain attribute, safe from a signal handler) to end whatever runs now.
        self.force_cancel = False
        self.clock = StepClock()  # a step: from a job's start or a sampled token to the next token
        self.on_finished: FinishedLog | None = None  # a line per finished request (._finished), as the batch engine
        self._task_ids = itertools.count(1)

    # -- capabilities ----------------------------------------------------------

    @property
    def slot_count(self) -> int:
        return 1

    @property
    def monitor(self) -> None:
        return None  # one llama_cpp.Llama: no slots, steps or metrics of its own

    @property
    def has_front(self) -> bool:
        return False

    def heartbeat(self) -> Heartbeat:
        """The engine's progress (:class:`StepClock`): steps, the one in progress, jobs waiting."""
        return self.clock.beat(self._queue.qsize() + (self._current is not None))

    def cancel_running(self) -> None:
        self.force_cancel = True

    # -- lifecycle -----------------------------------------------------------

    def start(
        self,
        load: Callable[[], Loaded],
        on_loaded: Callable[[Loaded], bool],
        on_failed: Callable[[BaseException], None],
        make_front: FrontFactory,  # never called: this engine runs jobs itself
    ) -> None:
        """Run ``load()`` on the engine thread, then serve jobs.

        ``on_loaded(result)`` returns False if the worker is stopping, in which
        case no job is ever served. Both callbacks run on the engine thread.
        """

        def run() -> None:
            try:
                loaded = load()
            except BaseException as exc:  # reported, then the process exits
                on_failed(exc)
                return
            self._llm = loaded.llm
            with self._lock:
                # Open before on_loaded records instance_ready: a client that saw the
                # event at once (modelrouter run) must not get a 503 in between.
                self._accepting = not self._drained
            accept = on_loaded(loaded)
            with self._lock:
                self._accepting = accept and not self._drained
            if self._accepting:
                self._serve()

        self._thread = threading.Thread(target=run, name="inference", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        if job.options.get("lora"):  # one Llama, one set of adapters: per-request sets are the batch engine's
            raise RequestRejected("a per-request 'lora' needs the batch engine (not --engine legacy)")
        with self._lock:
            if not self._accepting:
                raise EngineNotReady()
            self._idle.clear()
            self._queue.put(job)

    def drain(self, grace_s: float) -> None:
        """Stop accepting, reject queued jobs, give the running one ``grace_s`` seconds.

        After the grace period the running job is cancelled (ends within a
        token, or after the current prompt evaluation).
        """
        with self._lock:
            self._accepting = False
            self._drained = True
            self._queue.put(None)  # wakes and ends the serve loop after the current job
        if not self._idle.wait(grace_s):
            with self._lock:
                if self._current is not None:
                    self._current.cancel()
            self._idle.wait(2.0)

    # -- the engine thread ---------------------------------------------------

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                self._reject_rest()
                self._idle.set()
                return
            with self._lock:
                self._current = job
            try:
                if job.cancelled.is_set():
                    raise RequestCancelled("request cancelled before it started")
                job.started_at = time.monotonic()
                self.clock.begin()
                self._run(job)
            except BaseException as exc:  # delivered to the HTTP thread
                job.out.put(exc)
            finally:
                self.clock.end()
                job.out.put(END)
                with self._lock:
                    self._current = None
                    if self._queue.empty():
                        self._idle.set()

    def _reject_rest(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.out.put(EngineStopping())
                job.out.put(END)

    def _cancel_processor(self, job: Job, timings: Timings) -> Callable[[Any, Any], Any]:
        eos = self._llm.token_eos()

        def processor(input_ids: Any, scores: Any) -> Any:
            self.clock.end()  # llama_cpp.Llama decodes in one call per token: each one a step
            self.clock.begin()
            if not timings.predicted_n:  # the first sampling: the whole prompt is in the context
                timings.prompt_n = len(input_ids)
            timings.on_token(time.monotonic())  # a sampled token
            if job.cancelled.is_set() or self.force_cancel:
                scores[:] = -float("inf")
                scores[eos] = 0.0
            return scores

        return processor

    def _run(self, job: Job) -> None:
        import llama_cpp

        llm = self._llm
        if job.kind == "embedding":
            if not self.embedding_enabled:
                raise RequestRejected("this model was not loaded with --embedding; embeddings are unavailable")
            inputs, fmt = job.kwargs["input"], job.kwargs["encoding_format"]
            result = llm.create_embedding(inputs, model=self.model_name)
            job.out.put(_encode_embeddings(result, fmt))
            return
        kwargs = dict(job.kwargs)
        if kwargs.pop("llama_sampling", None):  # DRY, XTC, sampler order...: the batch engine's chain only
            raise RequestRejected(
                "llama.cpp's extra samplers (DRY, XTC, top-n-sigma, dynamic temperature, "
                "samplers, repeat_last_n) need the batch engine (this worker runs --engine legacy)"
            )
        kwargs.pop("reasoning_control", None)  # no slots to act on: a control answers 501 (http.dialects._control)
        timings = Timings(t_start=job.started_at or time.monotonic())
        kwargs["logits_processor"] = llama_cpp.LogitsProcessorList([self._cancel_processor(job, timings)])
        try:
            create = llm.create_chat_completion if job.kind == "chat" else llm.create_completion
            result = create(**kwargs)
        except ValueError as exc:  # e.g. "Requested tokens (n) exceed context window"
            raise RequestRejected(str(exc)) from None
        if not job.stream:
            self._finished(timings, *_ending(result), result.get("usage"))  # before the HTTP thread reshapes it
            job.out.put(result)
            return
        ending = ("", "")
        try:
            for chunk in result:
                ending = _ending(chunk)
                job.out.put(chunk)
        except ValueError as exc:
            raise RequestRejected(str(exc)) from None
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        self._finished(timings, *ending, None)

    def _finished(self, timings: Timings, cmpl_id: str, stop: str, usage: LlamaAnswer | None) -> None:
        """The request's ``request_finished`` line. What ``llama_cpp.Llama`` does not say is counted
        here: ``prompt_n`` is the whole prompt (``cache_n`` 0: it does not say how much it reused),
        and a stream's ``predicted_n`` the tokens sampled (an end-of-generation token included, as
        llama-server's ``n_gen``); a whole answer's numbers are its ``usage``."""
        if self.on_finished is None:
            return
        if usage:
            timings.prompt_n, timings.predicted_n = int(usage["prompt_tokens"]), int(usage["completion_tokens"])
        log_finished(
            self.on_finished,
            next(self._task_ids),
            cmpl_id,
            stop,
            timings.to_json(),
            id_slot=0,
            tokens_cached=int(self._llm.n_tokens),
        )


def _ending(answer: LlamaAnswer) -> tuple[str, str]:
    """An answer's (or a stream chunk's) id and finish reason (empty while it runs)."""
    choices: list[LlamaAnswer] = answer.get("choices") or [{}]
    return str(answer.get("id") or ""), str(choices[0].get("finish_reason") or "")


def _encode_embeddings(result: LlamaAnswer, fmt: str) -> LlamaAnswer:
    """Apply ``encoding_format``; base64 is little-endian float32, as OpenAI sends it."""
    if fmt == "base64":
        import numpy as np  # only embedding workers get here; numpy costs ~0.1 s of start-up

        for item in result.get("data", []):
            vec = np.asarray(item["embedding"], dtype="<f4")
            item["embedding"] = base64.b64encode(vec.tobytes()).decode("ascii")
    return result
