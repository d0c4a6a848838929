"""How a chat becomes a model's prompt, as llama-server renders it (``common/chat.cpp``).

Which template (``common_chat_templates_init``): ``--chat-template-file``'s
text, else the GGUF's ``tokenizer.chat_template`` (its ``tool_use`` variant
when a request carries tools), else ChatML -- llama-server's fallback, where
llama-cpp-python would pick ``llama-2``'s ``[INST]`` turns (which is why a
template-less GGUF such as Gemma 3 270M's used to get a prompt no llama-server
would send).

How it renders: with Jinja (``--jinja``, llama-server's default) through
llama-cpp-python's :class:`~llama_cpp.llama_chat_format.Jinja2ChatFormatter`
(the sandboxed environment, ``raise_exception``, ``strftime_now`` and
Transformers' ``tojson``), given llama-server's variables: ``messages``,
``bos_token``, ``eos_token``, ``tools``, ``add_generation_prompt``,
``enable_thinking`` and every ``chat_template_kwargs`` key; the BOS text a
template writes is cut when the tokenizer adds BOS itself (so it is not there
twice), as ``common_chat_template_direct_apply_impl`` does. With
``--no-jinja``, llama.cpp's own built-in template application through the C
API (``llama_chat_apply_template``), exactly llama-server's legacy path.

A registered llama-cpp-python format (``--chat-template chatml``, ``vicuna``,
...: modelrouter's ``chat_format``) is rendered by llama-cpp-python's handler,
stopped before it generates (:class:`HandlerRenderer`), so its stop strings
come along.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject
from workers.inference.http.chat._formats import WRITES_FUNCTIONS
from workers.inference.llama import LlamaModel

# llama.cpp's CHATML_TEMPLATE_SRC, byte for byte: the template of a GGUF that has none.
CHATML_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)

Message = dict[str, Any]  # Any: OpenAI message values (strings, part lists, tool calls)


@dataclass(frozen=True)
class Rendered:
    """A rendered chat: the prompt text, whether the tokenizer adds BOS, and the format's stop strings;
    a chat that continues its last message (``_continuation``) also has the prompt's tail that the
    answer starts with (after the reasoning's opening tag, if it opened it), and whether a stream
    leaves it out (``continue_final_message``)."""

    prompt: str
    add_special: bool = True
    stops: tuple[str, ...] = ()
    prefill: str = ""
    quiet_prefill: bool = False


@dataclass(frozen=True)
class TemplateOptions:
    """How the worker was told to render chats (``--chat-template-file``, ``--no-jinja``, kwargs,
    ``--no-prefill-assistant``)."""

    template_text: str | None = None  # --chat-template-file's contents
    jinja: bool = True
    default_kwargs: JsonObject = field(default_factory=dict)  # --chat-template-kwargs' JSON values
    prefill_assistant: bool = True  # --no-prefill-assistant: a last assistant message is a whole turn


def message_text(content: Any) -> str:
    """A message's content as one string: text parts joined by newlines, as llama.cpp does
    for templates that take strings (``common_chat_templates_apply_legacy``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def _template_message(msg: Message, object_args: bool = True) -> Message:
    """A message as templates read it: string content, tool-call arguments as objects
    (llama.cpp's ``func_args_not_string``: templates write them with ``| tojson``) unless
    ``object_args`` is false (a template that adds them to strings, as Functionary v3.2's does)."""
    out = dict(msg)
    out["content"] = message_text(msg.get("content"))
    calls = msg.get("tool_calls")
    if isinstance(calls, list) and object_args:
        fixed = []
        for call in calls:
            fn = dict(call.get("function") or {}) if isinstance(call, dict) else {}
            args = fn.get("arguments")
            if isinstance(args, str):
                with contextlib.suppress(json.JSONDecodeError):  # a template that wants a string still gets one
                    fn["arguments"] = json.loads(args)
            fixed.append({**call, "function": fn} if isinstance(call, dict) else call)
        out["tool_calls"] = fixed
    return out


class JinjaRenderer:
    """A Jinja chat template, rendered as llama-server renders it (see the module docstring)."""

    def __init__(self, source: str, *, bos: str, eos: str, add_bos: bool, add_eos: bool) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.source = source
        self._bos, self._eos = bos, eos
        self._add_bos, self._add_eos = add_bos, add_eos
        try:
            self._with_prompt = Jinja2ChatFormatter(source, eos_token=eos, bos_token=bos, add_generation_prompt=True)
            self._without = Jinja2ChatFormatter(source, eos_token=eos, bos_token=bos, add_generation_prompt=False)
        except Exception as exc:  # jinja2's TemplateSyntaxError and friends
            msg = f"the chat template does not parse: {exc}"
            raise ValueError(msg) from exc

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: list[Any] | None,
        add_generation_prompt: bool,
        kwargs: JsonObject,
    ) -> Rendered:
        formatter = self._with_prompt if add_generation_prompt else self._without
        now = datetime.datetime.now()
        # llama.cpp's common_chat_extra_context: FireFunction's template writes today's date
        # Any: the template's variables, as jinja takes them (llama-cpp-python types its formatter's keywords)
        context: dict[str, Any] = {
            "enable_thinking": True,
            "datetime": now.strftime("%b %d %Y"),
            "date_string": now.strftime("%d %b %Y"),
            **kwargs,
        }
        if tools:
            context["tools"] = tools
        if WRITES_FUNCTIONS in self.source:  # FireFunction v2 reads the tools as JSON text, as llama.cpp gave them
            context["functions"] = json.dumps(tools, indent=2) if tools else ""
        try:
            try:
                msgs: Any = [_template_message(m) for m in messages]  # Any: llama-cpp-python types them as TypedDicts
                prompt = formatter(messages=msgs, **context).prompt
            except TypeError:  # arguments as objects where the template adds strings: as the client sent them
                if not any(m.get("tool_calls") for m in messages):
                    raise
                msgs = [_template_message(m, object_args=False) for m in messages]
                prompt = formatter(messages=msgs, **context).prompt
        except ValueError:
            raise  # raise_exception() in the template: the client's chat is what it refuses
        except Exception as exc:  # an undefined variable, a type error inside the template
            raise ValueError(f"the chat template failed: {exc}") from exc
        if self._add_bos and self._bos and prompt.startswith(self._bos):
            prompt = prompt[len(self._bos) :]
        if self._add_eos and self._eos and prompt.endswith(self._eos):
            prompt = prompt[: -len(self._eos)]
        return Rendered(prompt)


class LegacyRenderer:
    """``--no-jinja``: llama.cpp's built-in templates, recognised from the template text or name."""

    def __init__(self, llm: LlamaModel, source: str) -> None:
        self.source = source
        self._lc = llm.lc

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: list[Any] | None,
        add_generation_prompt: bool,
        kwargs: JsonObject,
    ) -> Rendered:
        lc = self._lc
        texts = [(str(m.get("role", "")).encode(), message_text(m.get("content")).encode()) for m in messages]
        chat = (lc.llama_chat_message * len(texts))(*(lc.llama_chat_message(r, c) for r, c in texts))
        size = sum(len(r) + len(c) for r, c in texts) * 2 + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = lc.llama_chat_apply_template(self.source.encode(), chat, len(texts), add_generation_prompt, buf, size)
            if n < 0:
                msg = "this chat template is not one llama.cpp knows without Jinja (start without --no-jinja)"
                raise ValueError(msg)
            if n <= size:
                return Rendered(buf.raw[:n].decode("utf-8", errors="replace"))
            size = n
        raise ValueError("the chat template's output kept growing")


class _Rendered(Exception):
    def __init__(self, rendered: Rendered) -> None:
        super().__init__("rendered")
        self.rendered = rendered


class _Probe:
    """Stands in for ``Llama`` in a llama-cpp-python chat handler: records the prompt it
    tokenizes and stops it at ``create_completion``, keeping the format's stop strings."""

    verbose = False

    def __init__(self, front: Any) -> None:
        self._front = front
        self._prompt = ""
        self._add_bos = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._front, name)

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        self._prompt, self._add_bos = text.decode("utf-8", errors="replace"), add_bos
        return [self._front.llm.bos]  # never evaluated: create_completion stops the handler

    def create_completion(self, *args: Any, **kwargs: Any) -> Any:
        stop = kwargs.get("stop")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        raise _Rendered(Rendered(self._prompt, self._add_bos, stops))


class HandlerRenderer:
    """A llama-cpp-python chat format (``--chat-template NAME`` of a registered format)."""

    def __init__(self, handler: Callable[..., Any], front: Any, name: str) -> None:
        self._handler, self._front = handler, front
        self.source = name

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: list[Any] | None,
        add_generation_prompt: bool,
        kwargs: JsonObject,
    ) -> Rendered:
        msgs = [{**m, "content": message_text(m.get("content"))} for m in messages]
        try:
            self._handler(llama=_Probe(self._front), messages=msgs, max_tokens=1)
        except _Rendered as done:
            return done.rendered
        except (TypeError, KeyError) as exc:
            raise ValueError(str(exc)) from None
        raise ApiError(501, "this model's chat format does not render a text prompt", "not_supported_error")


Renderer = JinjaRenderer | LegacyRenderer | HandlerRenderer


def build_renderer(llm: LlamaModel, opts: TemplateOptions, chat_format: str | None, front: Any) -> Renderer:
    """The renderer for this model (see the module docstring for the order)."""
    if opts.template_text is None and chat_format is not None and not chat_format.startswith("chat_template."):
        from llama_cpp import llama_chat_format as lcf

        return HandlerRenderer(lcf.get_chat_completion_handler(chat_format), front, chat_format)
    source = opts.template_text
    if source is None and chat_format is not None:
        name = chat_format.removeprefix("chat_template.")
        source = llm.chat_template(None if name == "default" else name)
        if source is None:
            raise ValueError(f"the model has no chat template named {name!r}")
    if source is None:
        source = llm.chat_template() or CHATML_TEMPLATE
    if source.strip() == "chatml":
        source = CHATML_TEMPLATE
    if not opts.jinja:
        return LegacyRenderer(llm, source)
    eos = llm.token_text(llm.eos) if llm.eos >= 0 else ""
    bos = llm.token_text(llm.bos) if llm.bos >= 0 else ""
    return JinjaRenderer(source, bos=bos, eos=eos, add_bos=llm.add_bos, add_eos=llm.add_eos)
