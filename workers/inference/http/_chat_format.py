"""Which llama-cpp-python chat handler formats a model's chats, decided as ``Llama.__init__`` does.

Order: an explicit ``--chat-format`` (a registered format such as ``chatml``,
or ``chat_template.<name>`` for a named template in the GGUF); else the GGUF's
``tokenizer.chat_template``, as the registered format it is recognised as, or
rendered by ``Jinja2ChatFormatter`` with the model's BOS/EOS texts; else
``llama-2``. The handlers are llama-cpp-python's own; they run against
:class:`workers.inference.http._front.CompletionFront`.
"""

from __future__ import annotations

from typing import Any

from workers.inference.llama import LlamaModel


def resolve_chat_handler(llm: LlamaModel, chat_format: str | None) -> Any:
    """The chat handler (``handler(llama=..., messages=..., ...)``) for this model."""
    from llama_cpp import llama_chat_format as lcf

    if chat_format is not None and chat_format.startswith("chat_template."):
        name = chat_format.removeprefix("chat_template.")
        template = llm.chat_template(None if name == "default" else name)
        if template is None:
            raise ValueError(f"the model has no chat template named {name!r}")
        return _jinja_handler(lcf, llm, template)
    if chat_format is not None:
        return lcf.get_chat_completion_handler(chat_format)
    template = llm.chat_template()
    if template is None:
        return lcf.get_chat_completion_handler("llama-2")
    guessed = lcf.guess_chat_format_from_gguf_metadata({"tokenizer.chat_template": template})
    if guessed is not None:
        return lcf.get_chat_completion_handler(guessed)
    return _jinja_handler(lcf, llm, template)


def _jinja_handler(lcf: Any, llm: LlamaModel, template: str) -> Any:
    eos = llm.token_text(llm.eos) if llm.eos >= 0 else ""
    bos = llm.token_text(llm.bos) if llm.bos >= 0 else ""
    formatter = lcf.Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, stop_token_ids=[llm.eos])
    return formatter.to_chat_handler()
