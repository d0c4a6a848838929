"""One chat request on the batch engine: the prompt llama-server would send, then its output read as a message.

:func:`chat_prompt` is the one place a chat becomes a prompt: ``/v1/chat/completions``,
``/apply-template``, ``/v1/messages``, ``/v1/responses`` and every
``input_tokens`` count call it, so what ``/apply-template`` shows is what is
evaluated. Tools (llama-server's ``common_chat_templates_apply_jinja``):

* a template that writes ``tools`` itself gets them; one of a known family
  that writes calls but not the tools (DeepSeek R1/V3.1) gets them in a
  system message and is read in its family's syntax; any other gets
  llama.cpp's generic system prompt describing them, and its output is
  constrained to the generic JSON (a tool call, or ``{"response": ...}``);
* ``tool_choice`` ``required`` (or a named function) constrains the output to
  tool calls in the template family's syntax with a grammar built from the
  tools' JSON schemas (:mod:`workers.inference.http.chat._grammar`), one call
  unless ``parallel_tool_calls`` (by default, as llama-server: the template's
  ``supports_parallel_tool_calls``); ``auto`` lets the model choose and parses
  what it wrote; ``none`` parses no tool calls.

:class:`ChatRun` then reads the engine's token stream and re-parses the text so far
after every token (:mod:`workers.inference.http.chat._parse`), yielding the
deltas a stream sends; the whole answer is the last parse.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject, LlamaKwargs
from workers.inference.http._record import CompletionLogprobs, RequestRecord, Telemetry, TokenProbs
from workers.inference.http.chat._continuation import continuation, continue_chat
from workers.inference.http.chat._media import media_prompt
from workers.inference.http.chat._parse import (
    ChatMessage,
    Delta,
    diff,
    parse,
    syntax_of,
    template_knows_tools,
    thinking_prompt,
)
from workers.inference.http.chat._template import Message, Rendered, TemplateOptions
from workers.inference.http.chat._template_caps import template_caps
from workers.inference.http.chat._tool_prompt import (
    call_grammar,
    generic_system,
    schema_gbnf,
    tool_choice_mode,
    tool_functions,
    tools_system,
)

REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")
# The sampling defaults of chats (llama-cpp-python's create_chat_completion's, kept for continuity).
CHAT_DEFAULTS = {"temperature": 0.2, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.0}
_CHAT_ONLY = (
    "messages",
    "tools",
    "tool_choice",
    "response_format",
    "logprobs",
    "top_logprobs",
    "functions",
    "function_call",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "reasoning_format",
    "reasoning_effort",
    "add_generation_prompt",
    "continue_final_message",
    "media",
    "reasoning_control",
)


@dataclass(frozen=True)
class ChatPlan:
    """What a chat request asks for, decided before anything runs."""

    rendered: Rendered
    syntax: str | None  # tool-call syntax to parse, None: no tools
    family: str  # the template's family (its reasoning tags, GPT-OSS's channels)
    # Any: each tool's parameters JSON schema as the client sent it, by name (the XML readers' value types)
    types: dict[str, Any]
    grammar: str | None  # GBNF constraining the output
    thinking: bool  # the prompt already opened <think>
    reasoning_format: str
    logprobs: int | None  # top logprobs per token, None: none asked for
    sampling: LlamaKwargs = field(default_factory=dict)  # create_completion's keyword values
    media: tuple[tuple[str, bytes], ...] = ()  # the chat's media files (kind, bytes), one marker each in the prompt
    reasoning_control: bool = False  # its reasoning may be ended while it runs (llama-server's; _control)


def _kwargs(body: LlamaKwargs, defaults: JsonObject) -> JsonObject:
    """The template's variables, as llama-server's ``oaicompat_chat_params_parse`` sets them: the
    server's kwargs (``--chat-template-kwargs``, ``--reasoning``) under the request's, a string
    ``enable_thinking`` refused, and ``reasoning_effort`` ``none`` switching thinking off unless a
    kwarg says otherwise (the renderer's ``enable_thinking`` lies under the kwargs), any other
    effort passed on as ``reasoning_effort``."""
    extra = body.get("chat_template_kwargs")
    if extra is not None and not isinstance(extra, dict):
        raise ApiError(400, "'chat_template_kwargs' must be an object")
    kwargs = {**defaults, **(extra or {})}
    if isinstance(kwargs.get("enable_thinking"), str):
        raise ApiError(400, 'invalid type for "enable_thinking" (expected boolean, got string)')
    effort = body.get("reasoning_effort")
    if effort == "none":
        kwargs.pop("reasoning_effort", None)
        kwargs.setdefault("enable_thinking", False)
    elif isinstance(effort, str) and effort:
        kwargs["reasoning_effort"] = effort
    return kwargs


def chat_prompt(
    renderer: Any, body: LlamaKwargs, defaults: JsonObject, *, prefill_assistant: bool = True
) -> tuple[Rendered, str | None, str | None]:
    """``(rendered prompt, tool syntax, grammar)`` of a validated chat request (see the module docstring;
    ``prefill_assistant``: a last assistant message is continued, llama-server's default)."""
    messages: list[Message] = list(body["messages"])
    tools = body.get("tools")
    add_generation_prompt = body.get("add_generation_prompt", True)
    if not isinstance(add_generation_prompt, bool):
        raise ApiError(400, "'add_generation_prompt' must be a boolean")
    cont = continuation(
        messages, add_generation_prompt, body.get("continue_final_message"), prefill_assistant=prefill_assistant
    )
    syntax: str | None = None
    grammar: str | None = None
    kwargs = _kwargs(body, defaults)
    if tools:
        fns = tool_functions(tools)
        mode, names = tool_choice_mode(body.get("tool_choice"), [str(fn["name"]) for fn in fns])  # strings (checked)
        source = getattr(renderer, "source", "")
        family = syntax_of(source)
        native = template_knows_tools(source)
        # a template that writes calls in a family's syntax without describing the tools (DeepSeek R1,
        # V3.1): its calls are read in that syntax, as llama.cpp reads them
        own = native or family not in ("generic", "llama3")
        if mode != "none":
            syntax = family if own else "generic"
            # llama-server's default: the template's supports_parallel_tool_calls, as /props shows it
            parallel = bool(body.get("parallel_tool_calls", template_caps(source)["supports_parallel_tool_calls"]))
            if mode == "required" or syntax == "generic":
                grammar = call_grammar(syntax, fns, names, parallel=parallel, free=mode != "required", template=source)
        if not native:
            messages = tools_system(messages, fns) if own else generic_system(messages, fns)
            tools = None
    if cont is not None:  # a prefilled answer, or continue_final_message (_continuation)
        return continue_chat(renderer, messages, tools or None, kwargs, cont), syntax, grammar
    rendered = renderer.render(
        messages, tools=tools or None, add_generation_prompt=add_generation_prompt, kwargs=kwargs
    )
    return rendered, syntax, grammar


def _response_grammar(fmt: JsonObject | None) -> str | None:
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "gbnf":  # llama-server's own ``grammar`` field on a chat (_requests.chat_request)
        return str(fmt["grammar"])
    from llama_cpp.llama_grammar import JSON_GBNF

    schema = fmt.get("schema")
    return schema_gbnf(schema, "root") if schema else JSON_GBNF


def plan_chat(renderer: Any, kwargs: LlamaKwargs, options: TemplateOptions, reasoning_default: str) -> ChatPlan:
    """A validated chat request (``_requests.chat_request``'s kwargs) as a :class:`ChatPlan`, rendered
    with the worker's template options (``--chat-template-kwargs``, ``--no-prefill-assistant``)."""
    rendered, syntax, grammar = chat_prompt(
        renderer, kwargs, options.default_kwargs, prefill_assistant=options.prefill_assistant
    )
    if grammar is None:
        grammar = _response_grammar(kwargs.get("response_format"))
    fmt = kwargs.get("reasoning_format", reasoning_default)
    if fmt not in REASONING_FORMATS:
        raise ApiError(400, f"'reasoning_format' must be one of {list(REASONING_FORMATS)}")
    top = kwargs.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20):
        raise ApiError(400, "'top_logprobs' must be an integer in [0, 20]")
    sampling = {k: v for k, v in kwargs.items() if k not in _CHAT_ONLY}
    if rendered.stops:
        sampling["stop"] = [*sampling.get("stop", []), *rendered.stops]
    family = syntax_of(getattr(renderer, "source", "") or "")
    tools = kwargs.get("tools") if syntax is not None else None
    types = {str(fn["name"]): fn.get("parameters") or {} for fn in tool_functions(tools)} if tools else {}
    return ChatPlan(
        rendered=rendered,
        syntax=syntax,
        family=family,
        types=types,
        grammar=grammar,
        thinking=thinking_prompt(rendered.prompt.removesuffix(rendered.prefill), family),
        reasoning_format="deepseek" if fmt == "auto" else fmt,
        logprobs=(20 if top is None else top) if kwargs.get("logprobs") else None,  # llama-server's default: 20
        sampling=sampling,
        media=tuple(kwargs.get("media") or ()),
        reasoning_control=bool(kwargs.get("reasoning_control")),
    )


def _chat_logprobs(lp: CompletionLogprobs | None, top: int) -> list[TokenProbs]:
    """A completion chunk's logprobs as OpenAI chat ``logprobs.content`` entries: llama-server's
    (``id``, ``token``, ``bytes``, ``logprob``, and the ``top`` likeliest as ``top_logprobs``)."""
    if not lp:
        return []
    return [{**entry, "top_logprobs": entry["top_logprobs"][:top]} for entry in lp["content"]]


class ChatRun:
    """A chat on the batch engine: submit the planned prompt, read the output as deltas."""

    def __init__(self, front: Any, plan: ChatPlan, result: RequestRecord) -> None:
        from llama_cpp.llama_grammar import LlamaGrammar

        self.plan = plan
        self.result = result  # the request's record: timings, usage, final (filled as it ends)
        self.message = ChatMessage()
        self.text = ""  # what the model wrote (the answer reads it after the prompt's prefill)
        self.finish_reason = "stop"
        self.logprobs: list[TokenProbs] = []
        self.extras: Telemetry = {}  # the step's llama-server telemetry: timings_per_token, prompt_progress
        rendered, media = plan.rendered, None
        if front.log_prompt is not None:  # llama-server's --log-prompts-dir: a chat's rendered prompt
            front.log_prompt(rendered.prompt)
        if plan.media:  # the projector splits the prompt at its markers and encodes each image
            media = media_prompt(front, rendered.prompt, plan.media, add_bos=rendered.add_special)
            tokens = media.tokens
        else:
            tokens = front.tokenize(rendered.prompt.encode(), add_bos=rendered.add_special, special=True)
        self.n_prompt = len(tokens)
        grammar = LlamaGrammar.from_string(plan.grammar, verbose=False) if plan.grammar else None
        self._chunks = front.create_completion(
            tokens, stream=True, grammar=grammar, logprobs=plan.logprobs, media=media, **plan.sampling
        )
        self._ids = uuid.uuid4().hex[:12]
        if rendered.quiet_prefill:  # continue_final_message: the stream starts after the prefill
            self.message = self._parse(final=False)

    def _parse(self, final: bool) -> ChatMessage:
        p = self.plan
        return parse(
            p.rendered.prefill + self.text,
            syntax=p.syntax,
            reasoning_format=p.reasoning_format,
            thinking=p.thinking,
            final=final,
            ids=lambda i: f"call_{self._ids}{i}",
            family=p.family,
            types=p.types,
        )

    def deltas(self) -> Iterator[tuple[list[Delta], list[TokenProbs]]]:
        """Each step's deltas (and its logprobs entries), until the output ends; then :attr:`message` is whole."""
        for chunk in self._chunks:
            choice = chunk["choices"][0]
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
                break
            if "prompt_progress" in chunk:  # return_progress: a step of its own, with no deltas
                self.extras = {"prompt_progress": chunk["prompt_progress"]}
                yield [], []
                continue
            self.extras = {"timings": chunk["timings"]} if "timings" in chunk else {}
            self.text += choice.get("text", "")
            lp = _chat_logprobs(choice.get("logprobs"), self.plan.logprobs or 0)
            self.logprobs += lp
            now = self._parse(final=False)
            changes, self.message = diff(self.message, now), now
            if changes or lp:
                yield changes, lp
        last = self._parse(final=True)
        changes, self.message = diff(self.message, last), last
        if self.message.tool_calls and self.finish_reason == "stop":
            self.finish_reason = "tool_calls"
        if changes:
            yield changes, []

    def run(self) -> ChatMessage:
        """The whole message (for answers that are not streamed)."""
        for _ in self.deltas():
            pass
        return self.message

    @property
    def n_predicted(self) -> int:
        return int(self.result.get("timings", {}).get("predicted_n", 0))

    @property
    def n_cached(self) -> int:
        return int(self.result.get("timings", {}).get("cache_n", 0))

    @property
    def stopping_word(self) -> str:
        final = self.result.get("final")
        return final["stopping_word"] if final else ""
