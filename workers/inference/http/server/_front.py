"""The batch engine's request front: OpenAI completions and chats, on the HTTP threads.

It offers the part of ``llama_cpp.Llama``'s interface the handlers use (``tokenize``,
``create_completion``, ``create_chat_completion``), backed by the batch engine; chats are
rendered and read by ``chat._session``. Rendering and tokenizing happen on the request's own
HTTP thread (ctypes releases the GIL while llama.cpp tokenizes), so a long prompt never
holds up the engine's step loop.

Per-request extras that OpenAI's signature has no room for (the disconnect check, ``cache_prompt``,
``lora``, ``id_slot``, ``n_cache_reuse``) travel in a thread-local :class:`RequestContext`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from workers.inference.engine import (
    EngineError,
    Job,
    Request,
    RequestQueue,
    SamplerError,
    SamplingParams,
    build_chain,
    chain_seed,
    greedy_pick,
)
from workers.inference.http._errors import ApiError, too_long
from workers.inference.http._json import LlamaKwargs
from workers.inference.http.chat import (
    CHAT_DEFAULTS,
    ChatPlan,
    ChatRun,
    TemplateOptions,
    build_renderer,
    media_prompt,
    plan_chat,
)
from workers.inference.http.dialects import (
    CompletionShaper,
    LlamaSampling,
    OpenAIChat,
    native_chunks,
    native_whole,
    reasoning_control,
    run_compat,
    tokenize_mixed,
    verbose_chat,
    verbose_completion,
    with_final_fields,
)
from workers.inference.http.server._logit_bias import logit_bias_ids
from workers.inference.http.server._multi import run_many, run_prompts
from workers.inference.http.server._request import (
    RequestContext,
    SettingsShown,
    gbnf_text,
    record_settings,
    request_events,
)
from workers.inference.llama import LlamaModel, MediaPrompt, Tokenizer, TokenizingCancelled


class CompletionFront:
    """``Llama``'s completion surface over the batch engine (see the module docstring)."""

    verbose = False
    log_prompt: Callable[[Any], None] | None = None  # --log-prompts-dir (_prompt_log), set by make_front
    spec_types = "none"  # --spec-type: generation_settings' speculative.types, set by make_front

    def __init__(
        self,
        engine: RequestQueue,
        llm: LlamaModel,
        *,
        model_name: str,
        chat_format: str | None = None,
        default_seed: int | None = None,
        max_prompt_tokens: int = 0,
        template: TemplateOptions | None = None,
        reasoning_format: str = "auto",
    ) -> None:
        self.engine, self.llm, self.model_name = engine, llm, model_name
        self.chat_format, self.default_seed = chat_format, default_seed
        limit = llm.n_ctx - 1
        self.max_prompt_tokens = min(max_prompt_tokens, limit) if max_prompt_tokens > 0 else limit
        self.tokenizer = Tokenizer(llm)
        self.template = template or TemplateOptions()
        self.reasoning_format = reasoning_format
        self._local = threading.local()
        self._renderer: Any = None
        self._renderer_error: BaseException | None = None
        self._renderer_ready = threading.Event()
        if self.template.template_text is not None:
            self._prepare_chat()  # a --chat-template-file that does not parse fails the load, as in llama-server
            if self._renderer_error is not None:
                raise ValueError(f"--chat-template-file: {self._renderer_error}")
        else:
            threading.Thread(target=self._prepare_chat, name="chat-format", daemon=True).start()

    # -- chat templates (workers.inference.http.chat._template) -------------------

    def _prepare_chat(self) -> None:
        try:
            from workers.inference.llama import complete_import

            complete_import()  # usually done already, while the model loaded
            self._renderer = build_renderer(self.llm, self.template, self.chat_format, self)
        except BaseException as exc:  # reported to chat requests
            self._renderer_error = exc
        finally:
            self._renderer_ready.set()

    def renderer(self) -> Any:
        """How this model's chats become prompts (a ``chat._template`` renderer)."""
        self._renderer_ready.wait()
        if self._renderer_error is not None:
            raise ApiError(500, f"chat template unavailable: {self._renderer_error}", "server_error")
        return self._renderer

    def plan_chat(self, kwargs: LlamaKwargs) -> ChatPlan:
        """A validated chat request as a ``ChatPlan`` (what is rendered, parsed and constrained)."""
        try:
            return plan_chat(self.renderer(), kwargs, self.template, self.reasoning_format)
        except (ValueError, TypeError, KeyError) as exc:  # raised by chat templates on bad input
            raise ApiError(400, str(exc)) from None

    # -- the HTTP side ---------------------------------------------------------------

    def run_job(self, job: Job) -> None:
        """Run a chat or completion job on this (HTTP) thread; attaches the result or stream to ``job``."""
        if job.kind not in ("chat", "completion", "messages", "responses", "transcription"):
            raise ApiError(400, "this model was not loaded with --embedding; embeddings are unavailable")
        opts = job.options
        if opts.get("prompts"):  # several prompts: one completion each (_multi)
            run_prompts(self, job, opts["prompts"])
            return
        if opts.get("n_cmpl", 1) > 1:
            if opts["n_cmpl"] > self.engine.slot_count:
                raise ApiError(400, f"'n_cmpl' must be at most the number of slots ({self.engine.slot_count})")
            run_many(self, job, opts["n_cmpl"])
            return
        try:  # a ValueError (a bad template input, a LoraError) is the client's: 400
            self._local.ctx = ctx = RequestContext(
                client_gone=job.client_gone,
                cache_prompt=opts.get("cache_prompt", True),
                ignore_eos=opts.get("ignore_eos", False),
                n_keep=opts.get("n_keep", 0),
                lora=self.llm.lora.request_key(opts["lora"]) if "lora" in opts else None,
                id_slot=opts.get("id_slot", -1),
                n_cache_reuse=opts.get("n_cache_reuse", 0),
                verbose=opts.get("verbose", False),
                return_progress=job.stream and opts.get("return_progress", False),
                timings_per_token=opts.get("timings_per_token", False),
            )
            if job.kind == "chat":
                result = self.create_chat_completion(**job.kwargs, include_usage=bool(opts.get("include_usage")))
            elif job.kind in ("messages", "responses", "transcription"):
                result = run_compat(self, job.kind, job.kwargs, job.stream, ctx.result)
            else:
                self.log_prompt and self.log_prompt(job.kwargs.get("prompt"))  # llama-server's --log-prompts-dir
                result = self.create_completion(**job.kwargs)
        except (ValueError, TypeError) as exc:  # raised by chat templates and handlers on bad input
            raise ApiError(400, str(exc)) from None
        finally:
            self._local.ctx = None
        result = verbose_completion(result, ctx.result, ctx.verbose and job.kind == "completion", stream=job.stream)
        if opts.get("native"):  # llama-server's /completion
            # ctx.result: params, prompt and n_prompt now; timings, usage and the final info once done
            fields = opts.get("response_fields")
            ctx.result["return_tokens"] = bool(opts.get("return_tokens"))
            if job.stream:
                job.attach(native_chunks(result, ctx.result, fields))
            else:
                job.attach(iter([native_whole(result, ctx.result, fields)]))
        elif job.kind != "completion":  # chats and their kin shape their own final fields
            job.attach(result if job.stream else iter([result]))
        elif job.stream:
            job.attach(with_final_fields(result, ctx.result, bool(opts.get("include_usage"))))
        else:
            result.setdefault("timings", ctx.result.get("timings", {}))
            job.attach(iter([result]))

    def embedding_pooling(self) -> int:
        """The pooling embeddings get: the model's context's with ``--embedding``, else the second
        context's (:meth:`~workers.inference.llama.LlamaModel.second_context_pooling`)."""
        return self.llm.pooling if self.engine.embedding_enabled else self.llm.second_context_pooling()

    def _ctx(self) -> RequestContext:
        ctx = getattr(self._local, "ctx", None)
        return ctx if ctx is not None else RequestContext()

    # -- Llama's surface, as the chat handlers use it ----------------------------------

    def n_ctx(self) -> int:
        return self.llm.n_ctx

    def token_bos(self) -> int:
        return self.llm.bos

    def token_eos(self) -> int:
        return self.llm.eos

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """Tokens of ``text``, refused with a 400 naming the limit when the prompt is too long."""
        limit = self.max_prompt_tokens
        if len(text) > 4 * limit and len(text) > self.tokenizer.max_prompt_bytes(limit):
            # Not tokenized: n_prompt_tokens is the least it could be (bytes / longest token's bytes).
            least = len(text) * limit // self.tokenizer.max_prompt_bytes(limit)
            raise too_long(f"{len(text)} bytes", limit, self.llm.n_ctx, max(least, limit + 1))
        try:
            tokens = self.tokenizer.tokenize(
                text.decode("utf-8", errors="replace"),
                add_special=add_bos,
                parse_special=special,
                cancelled=self._ctx().client_gone,
            )
        except TokenizingCancelled:
            raise ApiError(499, "client disconnected while the prompt was tokenized", "cancelled") from None
        if len(tokens) > limit:
            raise too_long(f"{len(tokens)} tokens", limit, self.llm.n_ctx, len(tokens))
        return tokens

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        return b"".join(self.llm.piece(t) for t in tokens)

    def create_chat_completion(self, **kwargs: Any) -> Any:
        """A chat: the rendered prompt through :meth:`create_completion`, its output read as a
        message (``workers.inference.http.chat._session``), in OpenAI's shape."""
        stream = bool(kwargs.pop("stream", False))
        include_usage = bool(kwargs.pop("include_usage", False))
        plan = self.plan_chat({**CHAT_DEFAULTS, **kwargs})
        ctx = self._ctx()
        ctx.cmpl_id = f"chatcmpl-{uuid.uuid4().hex}"
        ctx.reasoning = reasoning_control(self.llm, plan)
        shaper = OpenAIChat(run := ChatRun(self, plan, ctx.result), self.model_name, ctx.cmpl_id)
        answer = shaper.chunks(include_usage) if stream else shaper.whole()
        return verbose_chat(answer, run, self.model_name, stream=stream) if ctx.verbose else answer

    def create_completion(
        self,
        prompt: str | list[int | str],
        suffix: str | None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: str | list[str] | None = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        grammar: Any = None,
        logit_bias: dict[Any, float] | list[tuple[int | str, float]] | None = None,
        media: MediaPrompt | None = None,
        media_files: list[tuple[str, bytes]] | None = None,
        llama_sampling: LlamaSampling | None = None,
        **_ignored: Any,  # model, tfs_z, logits_processor, stopping_criteria: see docs/api.md
    ) -> Any:
        """``Llama.create_completion``: a completion dict, or an iterator of chunks when streaming
        (``media``: the prompt's images, whose ``tokens`` are then the prompt: ``_media.media_prompt``)."""
        if media_files and isinstance(prompt, str):  # /completion's multimodal_data
            media = media_prompt(self, prompt, media_files, add_bos=True)
        tokens = media.tokens if media is not None else self._prompt_tokens(prompt)
        params = SamplingParams(
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            typical_p=typical_p,
            repeat_penalty=repeat_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
            seed=seed,
            logit_bias=logit_bias_ids(self.llm, logit_bias, ignore_eos=self._ctx().ignore_eos),
            grammar=gbnf_text(grammar),
            n_probs=-1 if logprobs is None else int(logprobs),
            **(llama_sampling or {}),
        )
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        ctx = self._ctx()
        cmpl_id = f"cmpl-{uuid.uuid4()}"
        req = self._submit(tokens, params, max_tokens or 0, stops, media, ctx.cmpl_id or cmpl_id)
        settings = SettingsShown(self.reasoning_format, self.spec_types)
        record_settings(ctx, self.llm, params, stops, tokens, settings, max_tokens=max_tokens or -1, stream=stream)
        return self._shaped(
            req, ctx, cmpl_id, prompt, tokens, echo=echo, suffix=suffix or "", logprobs=bool(logprobs), stream=stream
        )

    def _shaped(
        self,
        req: Request,
        ctx: RequestContext,
        cmpl_id: str,
        prompt: str | list[int | str],
        tokens: list[int],
        *,
        echo: bool,
        suffix: str,
        logprobs: bool,
        stream: bool,
    ) -> Any:
        """The request's events as OpenAI completion chunks, or as the whole completion (``echo``: after the prompt)."""
        head = ""
        if echo:
            head = prompt if isinstance(prompt, str) else self.detokenize(tokens).decode("utf-8", "replace")
        probs = ctx.result.setdefault("probs", []) if logprobs else None
        ids = ctx.result.setdefault("tokens", []) if stream else None
        shape = CompletionShaper(cmpl_id, int(time.time()), self.model_name, len(tokens), self.llm, probs, ids)
        events, result = request_events(self.engine, req, ctx.client_gone), ctx.result
        if stream:
            return shape.chunks(events, head, suffix, result)
        return shape.whole(events, head, suffix, result)

    # -- internals -----------------------------------------------------------------

    def _prompt_tokens(self, prompt: str | list[int | str]) -> list[int]:
        if isinstance(prompt, list) and any(isinstance(t, str) for t in prompt):
            # strings mixed with token ids (llama-server's tokenize_mixed: BOS before a leading string)
            prompt = list(tokenize_mixed(self, prompt, add_special=True, parse_special=True))
        if isinstance(prompt, list):
            ids = [int(t) for t in prompt]
            if len(ids) > self.max_prompt_tokens:
                raise too_long(f"{len(ids)} tokens", self.max_prompt_tokens, self.llm.n_ctx, len(ids))
            if any(not 0 <= t < self.llm.n_vocab for t in ids):
                raise ApiError(400, f"prompt token ids must be in [0, {self.llm.n_vocab})")
            return ids
        if prompt == "":
            return [self.llm.bos]
        return self.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)

    def _submit(
        self,
        tokens: list[int],
        params: SamplingParams,
        max_tokens: int,
        stops: tuple[str, ...],
        media: Any = None,
        cmpl_id: str = "",
    ) -> Request:
        llm = self.llm
        try:
            chain = build_chain(llm.lc, llm.vocab, llm.n_vocab, params, self.default_seed, llm.n_ctx)
        except SamplerError as exc:
            raise ApiError(400, str(exc)) from None
        c = self._ctx()
        req = Request(
            tokens,
            params,
            max_tokens,
            stops,
            c.cache_prompt,
            c.n_keep,
            chain,
            media,
            c.lora,
            c.id_slot,
            c.n_cache_reuse,
            cmpl_id,
            c.reasoning,
            c.return_progress,
            c.timings_per_token,
            greedy=greedy_pick(params),
            seed=chain_seed(params, self.default_seed),
        )
        try:
            self.engine.enqueue(req)
        except EngineError:
            self.llm.lc.llama_sampler_free(chain)
            raise
        return req
