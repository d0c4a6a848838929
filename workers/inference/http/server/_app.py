"""What the inference worker's HTTP handlers share: the model, the engine, the worker's state, the request front.

The worker sets :attr:`InferenceApp.status` as its state changes (``/health``
reports it) and :attr:`InferenceApp.model_meta` once loaded; the engine calls
:meth:`InferenceApp.make_front` once the model has loaded (the batch engine's
requests run through that front, and llama-server's own routes need it).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workers.inference._lifecycle import WorkerState
from workers.inference.engine import Engine, RequestQueue
from workers.inference.http._json import JsonObject
from workers.inference.http._options import FrontOptions
from workers.inference.http.chat import TemplateOptions
from workers.inference.http.server._prompt_log import prompt_logger
from workers.inference.http.server._streams import Sessions

if TYPE_CHECKING:
    from workers.inference.http.server._front import CompletionFront  # loaded with the model (make_front)
    from workers.inference.llama import LlamaModel


@dataclass
class InferenceApp:
    """What the handlers need; ``status`` is the worker's, which ``/health`` reports."""

    model_name: str
    engine: Engine
    log: Any
    front_options: FrontOptions = field(default_factory=FrontOptions)
    streams: Sessions = field(default_factory=Sessions)  # resumable streams by X-Conversation-Id
    status: WorkerState = WorkerState.LOADING
    model_meta: JsonObject = field(default_factory=dict)
    created: int = field(default_factory=lambda: int(time.time()))
    front: CompletionFront | None = None  # the engine's request front, once loaded (make_front)
    # POST responses still being written; a graceful stop waits for them,
    # since the engine finishing a job is not the client having the bytes.
    _inflight: int = 0
    _inflight_cv: threading.Condition = field(default_factory=threading.Condition)

    @contextmanager
    def responding(self) -> Iterator[None]:
        """Around writing a POST response: :meth:`wait_responses` waits for it."""
        with self._inflight_cv:
            self._inflight += 1
        try:
            yield
        finally:
            with self._inflight_cv:
                self._inflight -= 1
                self._inflight_cv.notify_all()

    def make_front(self, engine: RequestQueue, llm: LlamaModel) -> CompletionFront:
        """The request front for ``engine`` (an engine's ``make_front``): called once, on the
        engine thread, when the model has loaded."""
        from workers.inference.http.server._front import CompletionFront

        opts = self.front_options
        self.front = CompletionFront(
            engine,
            llm,
            model_name=self.model_name,
            chat_format=opts.chat_format,
            default_seed=opts.default_seed,
            max_prompt_tokens=opts.max_prompt_tokens,
            template=template_options(opts),
            reasoning_format=opts.reasoning_format,
        )
        self.front.log_prompt = prompt_logger(opts.log_prompts_dir)
        self.front.spec_types = opts.spec_type
        return self.front

    def wait_responses(self, timeout: float) -> bool:
        """Wait until no POST response is being written; False on timeout."""
        with self._inflight_cv:
            return self._inflight_cv.wait_for(lambda: self._inflight == 0, timeout)


def template_options(opts: FrontOptions) -> TemplateOptions:
    """The chat template's options; an unreadable template file or bad kwargs fail the load
    (llama-server refuses to start on both). ``--reasoning on``/``off`` sets ``enable_thinking`` among
    the server's kwargs, as llama-server does: the templates that know it write their thinking block
    open, or empty and closed (``<think>\n</think>``); a request's ``chat_template_kwargs`` still win."""
    text = opts.chat_template
    if opts.chat_template_file is not None:  # llama-server: the file's text replaces --chat-template's
        try:
            text = Path(opts.chat_template_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--chat-template-file {opts.chat_template_file}: {exc}") from None
    kwargs: JsonObject = {}
    if opts.chat_template_kwargs:
        try:
            kwargs = json.loads(opts.chat_template_kwargs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--chat-template-kwargs is not JSON: {exc}") from None
        if not isinstance(kwargs, dict):
            raise ValueError("--chat-template-kwargs must be a JSON object")
    if opts.reasoning != "auto":  # llama-server's --reasoning on/off: the default of enable_thinking it writes
        kwargs["enable_thinking"] = opts.reasoning == "on"
    return TemplateOptions(
        template_text=text, jinja=opts.jinja, default_kwargs=kwargs, prefill_assistant=opts.prefill_assistant
    )
