"""The template families llama.cpp handles (``workers.inference.http.chat._formats``): each one is
recognised from its real template (``chat_templates/``, llama.cpp's own test data), renders the
request's tools, and its output -- plain text, a call, parallel calls, nested JSON arguments,
reasoning then a call -- reads as llama-server reads it (``common/chat.cpp``'s parsers), whole and
token by token. The tool-call grammars of ``tool_choice: required`` are built and compiled here;
one of them drives a real (tiny) model in tests/dropin/test_chat_apis.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.tiny_gguf import N_VOCAB, write_tiny_gguf
from workers.inference.http.chat._grammar import GRAMMAR_SYNTAXES, tool_grammar
from workers.inference.http.chat._parse import ChatMessage, Delta, diff, parse, syntax_of, thinking_prompt
from workers.inference.http.chat._session import chat_prompt
from workers.inference.http.chat._template import JinjaRenderer
from workers.inference.llama import ContextConfig, LlamaLog, LlamaModel, load_llama

TEMPLATES = Path(__file__).parent / "chat_templates"
FAMILY_OF_FILE = {
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek",
    "deepseek-ai-DeepSeek-V3.1": "deepseek",
    "deepseek-ai-DeepSeek-V3.2": "deepseek-dsml",
    "deepseek-ai-DeepSeek-V4": "deepseek-dsml",
    "Qwen3-Coder": "qwen3-coder",
    "google-gemma-4-31B-it": "gemma4",
    "openai-gpt-oss-120b": "gpt-oss",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command-r7b",
    "CohereForAI-c4ai-command-r-plus-tool_use": "command-r-plus",
    "fireworks-ai-llama-3-firefunction-v2": "firefunction-v2",
    "meetkai-functionary-medium-v3.1": "functionary-v3.1",
    "meetkai-functionary-medium-v3.2": "functionary-v3.2",
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "ibm-granite-granite-4.0": "hermes",
    "moonshotai-Kimi-K2": "kimi-k2",
    "GLM-4.6": "glm",
    "Apertus-8B-Instruct": "apertus",
    "LFM2-8B-A1B": "lfm2",
    "ByteDance-Seed-OSS": "seed-oss",
    "MiniMax-M2": "minimax-m2",
    "NVIDIA-Nemotron-Nano-v2": "nemotron-v2",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",  # Magistral's [THINK] and name[ARGS] calls
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "unsloth-Apriel-1.5": "apriel",
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
}
WEATHER = {"city": "Paris"}
PLAN = {"steps": [{"do": "pack", "with": ["map", "tea"]}, {"do": "go", "at": {"h": 9, "tz": "CET"}}], "dry": False}
TYPES = {
    "plan": {"type": "object", "properties": {"steps": {"type": "array"}, "dry": {"type": "boolean"}}},
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}}},
}
DS_CALL, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>"  # noqa: RUF001 (DeepSeek's full-width bars)
DS_END, DS_CALLS, DS_CALLS_END = "<｜tool▁call▁end｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"  # noqa: RUF001


def _j(value: object) -> str:
    return json.dumps(value)


def _xml_qwen(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else _j(v)}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _xml_seed(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>{v if isinstance(v, str) else _j(v)}</parameter>\n" for k, v in args.items())
    return f"<seed:tool_call>\n<function={name}>\n{params}</function>\n</seed:tool_call>"


def _glm(name: str, args: dict[str, Any]) -> str:
    params = "".join(
        f"<arg_key>{k}</arg_key>\n<arg_value>{v if isinstance(v, str) else _j(v)}</arg_value>\n"
        for k, v in args.items()
    )
    return f"<tool_call>{name}\n{params}</tool_call>"


def _minimax(calls: list[tuple[str, dict[str, Any]]]) -> str:
    invokes = "".join(
        f'<invoke name="{n}">\n'
        + "".join(f'<parameter name="{k}">{v if isinstance(v, str) else _j(v)}</parameter>\n' for k, v in a.items())
        + "</invoke>\n"
        for n, a in calls
    )
    return f"<minimax:tool_call>\n{invokes}</minimax:tool_call>"


DSML = "｜DSML｜"  # noqa: RUF001


def _dsml(calls: list[tuple[str, dict[str, Any]]], block: str = "function_calls") -> str:
    invokes = "".join(
        f'<{DSML}invoke name="{n}">\n'
        + "".join(
            f'<{DSML}parameter name="{k}" string="{str(isinstance(v, str)).lower()}">'
            f"{v if isinstance(v, str) else _j(v)}</{DSML}parameter>\n"
            for k, v in a.items()
        )
        + f"</{DSML}invoke>\n"
        for n, a in calls
    )
    return f"<{DSML}{block}>\n{invokes}</{DSML}{block}>"


def _ds(name: str, args: dict[str, Any]) -> str:
    return f"{DS_CALL}{name}{DS_SEP}{_j(args)}{DS_END}"


def _ds_r1(name: str, args: dict[str, Any]) -> str:
    return f"{DS_CALL}function{DS_SEP}{name}\n```json\n{_j(args)}\n```{DS_END}"


def _kimi(i: int, name: str, args: dict[str, Any]) -> str:
    return f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{_j(args)}<|tool_call_end|>"


def _harmony(name: str, args: dict[str, Any]) -> str:
    return f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{_j(args)}<|call|>"


# (family, output, parse keywords, reasoning, content, calls): what llama.cpp's tests of each
# family check (tests/test-chat.cpp), in our own cases.
CASES: list[tuple[str, str, dict[str, Any], str, str, list[tuple[str, Any]]]] = [
    # Command R+: "Action:" then a ```json list of {"tool_name", "parameters"}
    (
        "command-r-plus",
        'Looking.\nAction:\n```json\n[\n    {"tool_name": "get_weather", "parameters": {"city": "Paris"}},\n'
        f'    {{"tool_name": "plan", "parameters": {_j(PLAN)}}}\n]\n```',
        {},
        "",
        "Looking.\n",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    ("command-r-plus", "<|CHATBOT_TOKEN|>Sunny.<|END_OF_TURN_TOKEN|>", {}, "", "Sunny.", []),
    # Gemma 4: bare keys, <|"|> around strings, reasoning in a "thought" channel
    (
        "gemma4",
        '<|channel>thought\nParis?<channel|>On it.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'
        '<|tool_call>call:plan{steps:[{do:<|"|>pack<|"|>,with:[<|"|>map<|"|>,<|"|>tea<|"|>]},'
        '{do:<|"|>go<|"|>,at:{h:9,tz:<|"|>CET<|"|>}}],dry:false}<tool_call|>',
        {},
        "Paris?",
        "On it.",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "gemma4",
        '<|tool_call>call:get_weather{city:<|"|>a "quoted", {braced} <city><|"|>}<tool_call|>',
        {},
        "",
        "",
        [("get_weather", {"city": 'a "quoted", {braced} <city>'})],
    ),
    ("gemma4", "<|channel>thought<channel|>Hello, world!", {}, "", "Hello, world!", []),
    # DeepSeek V3.2 (function_calls) and V4 (tool_calls): DSML, each parameter saying if it is a string
    (
        "deepseek-dsml",
        "Both.</think>\n\n" + _dsml([("get_weather", {"city": "75001"}), ("plan", PLAN)]),
        {"thinking": True},
        "Both.",
        "",
        [("get_weather", {"city": "75001"}), ("plan", PLAN)],
    ),
    ("deepseek-dsml", "Sure.\n\n" + _dsml([("plan", PLAN)], "tool_calls"), {}, "", "Sure.\n\n", [("plan", PLAN)]),
    # DeepSeek V3.1: a prompt that opened <think>; content between the reasoning and the calls
    (
        "deepseek",
        f"Weighing it.</think>Checking.{DS_CALLS}{_ds('get_weather', WEATHER)}{_ds('plan', PLAN)}{DS_CALLS_END}",
        {"thinking": True},
        "Weighing it.",
        "Checking.",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    ("deepseek", "Plain answer.", {}, "", "Plain answer.", []),
    # DeepSeek R1 (and its distills): "function" then the name, a ```json fence
    (
        "deepseek",
        f"Hm.</think>{DS_CALLS}{_ds_r1('plan', PLAN)}{DS_CALLS_END}",
        {"thinking": True},
        "Hm.",
        "",
        [("plan", PLAN)],
    ),
    (
        "qwen3-coder",
        "Let me call it.\n" + _xml_qwen("get_weather", WEATHER) + "\n" + _xml_qwen("plan", PLAN),
        {"types": TYPES},
        "",
        "Let me call it.\n",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    # Qwen3-Coder models sometimes leave out the first <tool_call>
    (
        "qwen3-coder",
        "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        {},
        "",
        "",
        [("get_weather", WEATHER)],
    ),
    # a string parameter holding code keeps its quotes and inner newlines
    (
        "qwen3-coder",
        _xml_qwen("get_weather", {"city": 'say "hi"\n\nthen'}),
        {"types": TYPES},
        "",
        "",
        [("get_weather", {"city": 'say "hi"\n\nthen'})],
    ),
    (
        "seed-oss",
        "<seed:think>Which city?</seed:think>\n" + _xml_seed("get_weather", WEATHER) + "\n" + _xml_seed("plan", PLAN),
        {"types": TYPES},
        "Which city?",
        "",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "glm",
        "<think>Let me see.</think>\n" + _glm("get_weather", WEATHER) + _glm("plan", PLAN),
        {"types": TYPES},
        "Let me see.",
        "",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "minimax-m2",
        "I'm\nthinking\n</think>\n\n" + _minimax([("get_weather", WEATHER), ("plan", PLAN)]),
        {"thinking": True, "types": TYPES},
        "I'm\nthinking",
        "",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "gpt-oss",
        "<|channel|>analysis<|message|>Need the weather.<|end|>" + _harmony("get_weather", WEATHER),
        {},
        "Need the weather.",
        "",
        [("get_weather", WEATHER)],
    ),
    (
        "gpt-oss",
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.",
        {},
        "Easy.",
        "Sunny.",
        [],
    ),
    (
        "gpt-oss",
        "<|channel|>commentary to=functions.plan <|constrain|>json<|message|>" + _j(PLAN),
        {},
        "",
        "",
        [("plan", PLAN)],
    ),
    (
        "command-r7b",
        "<|START_THINKING|>Look it up.<|END_THINKING|><|START_ACTION|>[\n"
        f'    {{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {_j(WEATHER)}}},\n'
        f'    {{"tool_call_id": "1", "tool_name": "plan", "parameters": {_j(PLAN)}}}\n]<|END_ACTION|>',
        {},
        "Look it up.",
        "",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    ("command-r7b", "<|START_RESPONSE|>Sunny in Paris.<|END_RESPONSE|>", {}, "", "Sunny in Paris.", []),
    (
        "firefunction-v2",
        f' functools[{{"name": "get_weather", "arguments": {_j(WEATHER)}}}, '
        f'{{"name": "plan", "arguments": {_j(PLAN)}}}]',
        {},
        "",
        "",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "functionary-v3.1",
        f"Sure.<function=get_weather>{_j(WEATHER)}</function><function=plan>{_j(PLAN)}</function>",
        {},
        "",
        "Sure.",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "functionary-v3.2",
        f"all\nOne moment.>>>get_weather\n{_j(WEATHER)}>>>plan\n{_j(PLAN)}",
        {},
        "",
        "One moment.",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    ("functionary-v3.2", "all\nHello, world!\nWhat's up?", {}, "", "Hello, world!\nWhat's up?", []),
    (
        "granite",
        f'<think>Hm.</think><|tool_call|>[{{"name": "plan", "arguments": {_j(PLAN)}}}]',
        {},
        "Hm.",
        "",
        [("plan", PLAN)],
    ),
    (
        "kimi-k2",
        f"<think>ok</think>Calling.<|tool_calls_section_begin|>{_kimi(0, 'get_weather', WEATHER)}"
        f"{_kimi(1, 'plan', PLAN)}<|tool_calls_section_end|>",
        {},
        "ok",
        "Calling.",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "apertus",
        f'<|inner_prefix|>Think.<|inner_suffix|><|tools_prefix|>[{{"get_weather": {_j(WEATHER)}}}, '
        f'{{"plan": {_j(PLAN)}}}]<|tools_suffix|>',
        {},
        "Think.",
        "",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "lfm2",
        '<think>Hm.</think>Checking.<|tool_call_start|>[get_weather(city="Paris"), plan(steps=[{"do": "pack", '
        '"with": ["map", "tea"]}, {"do": "go", "at": {"h": 9, "tz": "CET"}}], dry=False)]<|tool_call_end|>',
        {},
        "Hm.",
        "Checking.",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "nemotron-v2",
        f'Hm.\n</think>\n<TOOLCALL>[{{"name": "get_weather", "arguments": {_j(WEATHER)}}}]</TOOLCALL>',
        {"thinking": True},
        "Hm.",
        "",
        [("get_weather", WEATHER)],
    ),
    (
        "apriel",
        f'<tool_calls>[{{"name": "plan", "arguments": {_j(PLAN)}}}]</tool_calls>',
        {},
        "",
        "",
        [("plan", PLAN)],
    ),
    # Magistral / Ministral 3: [THINK] and name[ARGS]; Mistral Small 3.2 adds [CALL_ID]
    (
        "mistral",
        f"[THINK]Paris?[/THINK][TOOL_CALLS]get_weather[ARGS]{_j(WEATHER)}"
        f"[TOOL_CALLS]plan[CALL_ID]123456789[ARGS]{_j(PLAN)}",
        {},
        "Paris?",
        "",
        [("get_weather", WEATHER), ("plan", PLAN)],
    ),
    (
        "hermes",
        f'<think>ok</think>Sure.<tool_call>\n{{"name": "plan", "arguments": {_j(PLAN)}}}\n</tool_call>',
        {},
        "ok",
        "Sure.",
        [("plan", PLAN)],
    ),
]


def _calls(msg: ChatMessage) -> list[tuple[str, Any]]:
    return [(c.name, json.loads(c.arguments)) for c in msg.tool_calls]


@pytest.mark.parametrize(("file", "family"), sorted(FAMILY_OF_FILE.items()))
def test_each_real_template_is_recognised(file: str, family: str) -> None:
    assert syntax_of((TEMPLATES / f"{file}.jinja").read_text()) == family


@pytest.mark.parametrize(
    ("family", "text", "kw", "reasoning", "content", "calls"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_whole_outputs(
    family: str, text: str, kw: dict[str, Any], reasoning: str, content: str, calls: list[tuple[str, Any]]
) -> None:
    msg = parse(text, syntax=family, **kw)
    assert (msg.reasoning_content, msg.content, _calls(msg)) == (reasoning, content, calls)
    assert len({c.id for c in msg.tool_calls}) == len(calls)


@pytest.mark.parametrize(
    ("family", "text", "kw", "reasoning", "content", "calls"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_streamed_prefixes_give_consistent_deltas(
    family: str, text: str, kw: dict[str, Any], reasoning: str, content: str, calls: list[tuple[str, Any]]
) -> None:
    """Re-parsing after every character (a worst case of tokens): content and reasoning only grow,
    a call's name never changes once sent and its arguments only grow, no markup leaks, and the
    deltas add up to the whole parse."""
    before, deltas = ChatMessage(), list[Delta]()
    for end in range(1, len(text) + 1):
        now = parse(text[:end], syntax=family, final=end == len(text), **kw)
        assert now.content.startswith(before.content), text[:end]
        assert now.reasoning_content.startswith(before.reasoning_content), text[:end]
        assert len(now.tool_calls) >= len(before.tool_calls)
        for old, new in zip(before.tool_calls, now.tool_calls, strict=False):
            assert (old.name, old.id) == (new.name, new.id) and new.arguments.startswith(old.arguments), text[:end]
        deltas += diff(before, now)
        before = now
    assert "".join(d.reasoning_content for d in deltas) == reasoning
    assert "".join(d.content for d in deltas) == content
    for i, (name, args) in enumerate(calls):
        mine = [d for d in deltas if d.tool_index == i]
        assert [d.tool_name for d in mine if d.tool_name] == [name]
        assert json.loads("".join(d.tool_arguments for d in mine)) == args
    assert not any(m in d.content for d in deltas for m in ("<tool", "<|", "[TOOL", "functools", ">>>", "<func"))


def test_reasoning_tags_per_family() -> None:
    """``none`` leaves each family's reasoning in content; a generation prompt that opened the
    family's own tag starts the output inside it."""
    assert parse("<seed:think>a</seed:think>b", syntax=None, family="seed-oss", reasoning_format="none").content == (
        "<seed:think>a</seed:think>b"
    )
    assert thinking_prompt("<|im_start|>assistant\n<seed:think>\n", "seed-oss")
    assert thinking_prompt("[THINK]", "mistral") and not thinking_prompt("<think></think>", "deepseek")
    harmony = "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b"
    assert parse(harmony, syntax=None, family="gpt-oss", reasoning_format="none").content == harmony
    # tools not asked for: the markup is content, the reasoning still moves
    coder = parse("<think>a</think>" + _xml_qwen("get_weather", WEATHER), syntax=None, family="qwen3-coder")
    assert (coder.reasoning_content, coder.tool_calls) == ("a", []) and coder.content.startswith("<tool_call>")


def test_xml_parameters_take_their_schema_types() -> None:
    """A parameter the schema calls a string stays text even when it looks like JSON; others are JSON."""
    text = _xml_qwen("f", {"zip": "75001", "n": 3, "flags": [1, 2]})
    types = {"f": {"properties": {"zip": {"type": "string"}, "n": {"type": "integer"}}}}
    assert _calls(parse(text, syntax="qwen3-coder", types=types)) == [("f", {"zip": "75001", "n": 3, "flags": [1, 2]})]
    assert _calls(parse(text, syntax="qwen3-coder")) == [("f", {"zip": 75001, "n": 3, "flags": [1, 2]})]


def test_a_half_written_call_waits_for_its_name() -> None:
    partial = parse(
        "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_wea", syntax="kimi-k2", final=False
    )
    assert (partial.content, partial.tool_calls) == ("Sure.", [])
    started = parse(f"{DS_CALLS}{DS_CALL}plan{DS_SEP}" + '{"steps": [{"do"', syntax="deepseek", final=False)
    assert [(c.name, c.arguments) for c in started.tool_calls] == [("plan", '{"steps": [{"do"')]


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {  # Command R+'s template needs each parameter's description
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city"}},
            "required": ["city"],
        },
    },
}
ASK = {"role": "user", "content": "What is the weather in Paris?"}
CALLED = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {
            "id": "abcDEF123",
            "type": "function",  # Nemo: 9 alnum
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}
WRITES_NO_PAST_CALLS = {"LFM2-8B-A1B", "ibm-granite-granite-3.3-2B-Instruct"}  # their templates drop them


@pytest.mark.parametrize(("file", "family"), sorted(FAMILY_OF_FILE.items()))
def test_the_template_renders_tools_and_its_own_calls_read_back(file: str, family: str) -> None:
    """Through the product's one chat path (``chat_prompt``): the prompt describes the tool (the
    template itself, or a system message where it does not), calls are read in the family's
    syntax, and a past call as the template writes it parses back to that call -- the template's
    own syntax is what the parser expects (llama.cpp's ``expect_reconstruction``)."""
    renderer = JinjaRenderer(
        (TEMPLATES / f"{file}.jinja").read_text(), bos="<s>", eos="</s>", add_bos=False, add_eos=False
    )
    asked, syntax, grammar = chat_prompt(renderer, {"messages": [ASK], "tools": [WEATHER_TOOL]}, {})
    assert "get_weather" in asked.prompt and syntax == family and grammar is None
    if file in WRITES_NO_PAST_CALLS:
        return
    past, _, _ = chat_prompt(  # a last assistant turn rendered whole (--no-prefill-assistant), not continued
        renderer,
        {"messages": [ASK, CALLED], "tools": [WEATHER_TOOL], "add_generation_prompt": False},
        {},
        prefill_assistant=False,
    )
    # what the assistant wrote: after the generation prompt, or after the question where the
    # template renders a past turn differently (a reasoning model drops its thinking)
    start = (
        len(asked.prompt)
        if past.prompt.startswith(asked.prompt)
        else past.prompt.rindex(ASK["content"]) + len(ASK["content"])
    )
    wrote = parse(past.prompt[start:], syntax=syntax, family=family)
    assert _calls(wrote) == [("get_weather", {"city": "Paris"})], past.prompt[start:]


# -- grammars ------------------------------------------------------------------------------------

TOOLS = [
    {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
    },
    {
        "name": "plan",
        "parameters": {
            "type": "object",
            "properties": {"steps": {"type": "array", "items": {"type": "object"}}, "note": {"type": "string"}},
            "required": ["steps"],
        },
    },
]


@pytest.mark.parametrize("family", sorted(GRAMMAR_SYNTAXES))
@pytest.mark.parametrize("parallel", [False, True])
def test_required_grammars_compile_with_the_familys_markers(family: str, parallel: bool) -> None:
    """``tool_choice: required`` gets a grammar in the family's own syntax that llama.cpp's GBNF
    parser accepts, naming each tool (a named ``tool_choice`` only that one)."""
    from llama_cpp.llama_grammar import LlamaGrammar

    template = {"deepseek": "```json", "mistral": "[ARGS]", "deepseek-dsml": "function_calls"}.get(family, "")
    gbnf = tool_grammar(family, TOOLS, ["get_weather", "plan"], parallel=parallel, template=template)
    assert gbnf is not None
    LlamaGrammar.from_string(gbnf, verbose=False)
    assert "get_weather" in gbnf and "plan" in gbnf
    named = tool_grammar(family, TOOLS, ["plan"], parallel=parallel, template=template)
    assert named is not None and "get_weather" not in named
    marker = {
        "qwen3-coder": "<function=",
        "glm": "<arg_key>",
        "minimax-m2": "<invoke name=",
        "deepseek": "```json",
        "kimi-k2": "<|tool_call_argument_begin|>",
        "gpt-oss": "<|constrain|>json",
        "mistral": "[ARGS]",
        "command-r7b": "<|START_ACTION|>",
        "apertus": "<|tools_prefix|>",
    }.get(family)
    assert marker is None or marker in gbnf


def test_python_and_gemma_call_syntaxes_have_no_grammar() -> None:
    assert tool_grammar("lfm2", TOOLS, ["plan"], parallel=False) is None
    assert tool_grammar("gemma4", TOOLS, ["plan"], parallel=False) is None


# What each family's grammar lets a model write: two calls (one for llama3 and gpt-oss, which call
# one tool at a time), laid out as the family writes them; the parser must read them back.
W, P = '{"city": "Paris"}', '{"steps": [{"do": "x"}]}'
WROTE = {
    "hermes": f'<tool_call>\n{{"name": "get_weather", "arguments": {W}}}\n</tool_call>\n'
    f'<tool_call>\n{{"name": "plan", "arguments": {P}}}\n</tool_call>',
    "mistral": f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {W}}}, {{"name": "plan", "arguments": {P}}}]',
    "llama3": f'{{"name": "get_weather", "parameters": {W}}}',
    "deepseek": f"{DS_CALLS}{DS_CALL}get_weather{DS_SEP}{W}{DS_END}{DS_CALL}plan{DS_SEP}{P}{DS_END}{DS_CALLS_END}",
    "kimi-k2": f"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{W}"
    f"<|tool_call_end|><|tool_call_begin|>functions.plan:1<|tool_call_argument_begin|>{P}<|tool_call_end|>"
    "<|tool_calls_section_end|>",
    "functionary-v3.1": f"<function=get_weather>{W}</function><function=plan>{P}</function>",
    "functionary-v3.2": f"get_weather\n{W}>>>plan\n{P}",
    "nemotron-v2": f'<TOOLCALL>[{{"name": "get_weather", "arguments": {W}}}, {{"name": "plan", "arguments": {P}}}]'
    "</TOOLCALL>",
    "apriel": f'<tool_calls>[{{"name": "get_weather", "arguments": {W}}}, {{"name": "plan", "arguments": {P}}}]'
    "</tool_calls>",
    "firefunction-v2": f' functools[{{"name": "get_weather", "arguments": {W}}}, {{"name": "plan", "arguments": {P}}}]',
    "granite": f'<|tool_call|>[{{"name": "get_weather", "arguments": {W}}}, {{"name": "plan", "arguments": {P}}}]',
    "command-r7b": f'<|START_ACTION|>[\n    {{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {W}}},\n'
    f'    {{"tool_call_id": "1", "tool_name": "plan", "parameters": {P}}}\n]<|END_ACTION|>',
    "apertus": f'<|tools_prefix|>[{{"get_weather": {W}}}, {{"plan": {P}}}]<|tools_suffix|>',
    "gpt-oss": f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{W}",
    "qwen3-coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    '</tool_call>\n<tool_call>\n<function=plan>\n<parameter=steps>\n[{"do": "x"}]\n</parameter>\n'
    "</function>\n</tool_call>",
    "seed-oss": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n"
    '</seed:tool_call>\n<seed:tool_call>\n<function=plan>\n<parameter=steps>[{"do": "x"}]</parameter>\n'
    "</function>\n</seed:tool_call>",
    "glm": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n"
    '<tool_call>plan\n<arg_key>steps</arg_key>\n<arg_value>[{"do": "x"}]</arg_value>\n</tool_call>',
    "minimax-m2": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
    '</invoke>\n<invoke name="plan">\n<parameter name="steps">[{"do": "x"}]</parameter>\n</invoke>\n'
    "</minimax:tool_call>",
}
WROTE["deepseek-dsml"] = _dsml([("get_weather", {"city": "Paris"}), ("plan", {"steps": [{"do": "x"}]})], "tool_calls")
WROTE["command-r-plus"] = (
    f'Action:\n```json\n[{{"tool_name": "get_weather", "parameters": {W}}}, {{"tool_name": "plan", "parameters": {P}}}]\n```'
)
WROTE_R1 = f"{DS_CALLS}{DS_CALL}function{DS_SEP}get_weather\n```json\n{W}```{DS_END}{DS_CALLS_END}"
WROTE_MAGISTRAL = f"[TOOL_CALLS]get_weather[ARGS]{W}[TOOL_CALLS]plan[ARGS]{P}"


@pytest.fixture(scope="module")
def vocab_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaModel]:
    """A tiny byte-level model: its vocabulary lets llama.cpp's grammar sampler read any text."""
    log = LlamaLog(lambda level, text: None)
    log.install()
    path = write_tiny_gguf(tmp_path_factory.mktemp("vocab") / "tiny.gguf", chat_template=None)
    llm = load_llama(
        str(path), ContextConfig(n_ctx=64, n_parallel=1, warmup=False), log=log, on_progress=lambda p: True
    ).llm
    yield llm
    llm.close()


def _accepts(llm: LlamaModel, gbnf: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler lets a model write exactly ``text`` (token by token, then end)."""
    import ctypes

    lc = llm.lc
    sampler = lc.llama_sampler_init_grammar(llm.vocab, gbnf.encode(), b"root")
    assert sampler, "llama.cpp could not parse the grammar"
    try:
        tokens = [N_VOCAB - 256 + b for b in text.encode()]  # byte tokens (no SentencePiece space prefix)
        for token in [*tokens, llm.eos]:
            data = (lc.llama_token_data * 1)(lc.llama_token_data(token, 0.0, 0.0))
            candidates = lc.llama_token_data_array(ctypes.cast(data, ctypes.POINTER(lc.llama_token_data)), 1, -1, False)
            lc.llama_sampler_apply(sampler, ctypes.byref(candidates))
            if data[0].logit == float("-inf"):
                return False
            if token != llm.eos:
                lc.llama_sampler_accept(sampler, token)
        return True
    finally:
        lc.llama_sampler_free(sampler)


@pytest.mark.parametrize(
    ("family", "template", "text"),
    [
        *((f, "", t) for f, t in sorted(WROTE.items())),
        ("deepseek", "```json", WROTE_R1),
        ("mistral", "[ARGS]", WROTE_MAGISTRAL),
    ],
)
def test_what_the_grammar_allows_the_parser_reads(vocab_llm: LlamaModel, family: str, template: str, text: str) -> None:
    """The family's grammar accepts its calls as the family writes them (llama.cpp's own grammar
    sampler decides), refuses a tool that is not offered, and the parser reads the calls back."""
    single = family in ("llama3", "gpt-oss") or text == WROTE_R1
    gbnf = tool_grammar(family, TOOLS, ["get_weather", "plan"], parallel=not single, template=template)
    assert gbnf is not None
    assert _accepts(vocab_llm, gbnf, text)
    assert not _accepts(vocab_llm, gbnf, text.replace("get_weather", "get_wether"))
    one = tool_grammar(family, TOOLS, ["get_weather", "plan"], parallel=False, template=template)
    assert one is not None and (single or not _accepts(vocab_llm, one, text))  # one call unless parallel
    expected = [("get_weather", {"city": "Paris"})] + ([] if single else [("plan", {"steps": [{"do": "x"}]})])
    assert _calls(parse(text, syntax=family, types={t["name"]: t["parameters"] for t in TOOLS})) == expected


@pytest.mark.parametrize("family", ["qwen3-coder", "seed-oss", "glm", "minimax-m2"])
def test_a_string_parameter_streams_as_it_is_written(family: str) -> None:
    """Long text (code to write) reaches the client while the model writes it, not at its closing
    tag, and still ends as the whole parse's value, quotes and newlines included."""
    code = 'def f():\n    return "</par"\n\n'
    text = {"qwen3-coder": _xml_qwen, "seed-oss": _xml_seed, "glm": _glm}.get(family, lambda n, a: _minimax([(n, a)]))(
        "write", {"path": "a.py", "code": code}
    )
    types = {"write": {"properties": {"path": {"type": "string"}, "code": {"type": "string"}}}}
    before, pieces = ChatMessage(), []
    for end in range(1, len(text) + 1):
        now = parse(text[:end], syntax=family, final=end == len(text), types=types)
        pieces += [d.tool_arguments for d in diff(before, now) if d.tool_arguments]
        before = now
    expected = {"path": "a.py", "code": code}
    assert json.loads("".join(pieces)) == expected == json.loads(before.tool_calls[0].arguments)
    assert len(pieces) > len(code) // 2  # character by character, not one piece per parameter


def test_gpt_oss_without_tools_reads_no_call() -> None:
    text = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + _j(WEATHER)
    assert parse(text, syntax=None, family="gpt-oss").tool_calls == []
    assert _calls(parse(text, syntax="gpt-oss")) == [("get_weather", WEATHER)]
