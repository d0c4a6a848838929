"""The chat output parser (``workers.inference.http.chat._parse``): pure functions, so every
syntax and every partial reading is checked here; the served shapes are in tests/dropin."""

from __future__ import annotations

import json

import pytest

from workers.inference.http.chat._parse import ChatMessage, Delta, diff, parse, syntax_of

HERMES_TWO = (
    'Let me look.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
)


def _calls(msg: ChatMessage) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments)) for c in msg.tool_calls]


def test_template_families_pick_their_syntax() -> None:
    assert syntax_of("{% for t in tools %}<tool_call>{% endfor %}") == "hermes"
    assert syntax_of("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]") == "mistral"
    assert syntax_of("<|python_tag|>{{ tools }}") == "llama3"
    assert syntax_of("{{ messages }}") == "generic"


def test_parallel_hermes_calls_and_the_content_before_them() -> None:
    msg = parse(HERMES_TWO, syntax="hermes")
    assert msg.content == "Let me look."
    assert _calls(msg) == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]
    assert len({c.id for c in msg.tool_calls}) == 2


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
        ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'),
        ("generic", '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'),
        ("generic", '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}'),
    ],
)
def test_each_family_reads_its_call(syntax: str, text: str) -> None:
    assert _calls(parse(text, syntax=syntax)) == [("get_weather", {"city": "Paris"})]


def test_generic_plain_answer_is_content() -> None:
    msg = parse('{"response": "Bonjour"}', syntax="generic")
    assert (msg.content, msg.tool_calls) == ("Bonjour", [])


def test_no_tools_leaves_markup_in_content() -> None:
    assert parse(HERMES_TWO, syntax=None).content == HERMES_TWO


def test_reasoning_formats() -> None:
    text = "<think>\nweighing it</think>\nParis."
    deepseek = parse(text, syntax=None, reasoning_format="deepseek")
    assert (deepseek.reasoning_content, deepseek.content) == ("\nweighing it", "Paris.")
    assert parse(text, syntax=None, reasoning_format="none").content == text
    legacy = parse(text, syntax=None, reasoning_format="deepseek-legacy")
    assert (legacy.reasoning_content, legacy.content) == ("\nweighing it", text)
    # A prompt that opened <think> itself: the output starts inside the reasoning.
    opened = parse("weighing it</think>Paris.", syntax=None, thinking=True)
    assert (opened.reasoning_content, opened.content) == ("weighing it", "Paris.")


def test_streamed_deltas_add_up_to_the_whole_message() -> None:
    """Re-parsing every prefix and diffing gives deltas that rebuild the final parse exactly,
    with a call's id and name sent once, on its first delta."""
    text = "<think>hm</think>" + HERMES_TWO
    before = ChatMessage()
    deltas: list[Delta] = []
    for end in range(1, len(text) + 1):
        now = parse(text[:end], syntax="hermes", final=end == len(text))
        deltas += diff(before, now)
        before = now
    whole = parse(text, syntax="hermes")
    assert "".join(d.reasoning_content for d in deltas) == whole.reasoning_content == "hm"
    assert "".join(d.content for d in deltas) == whole.content == "Let me look."
    for i, call in enumerate(whole.tool_calls):
        mine = [d for d in deltas if d.tool_index == i]
        assert [d.tool_name for d in mine if d.tool_name] == [call.name]
        assert mine[0].tool_id == call.id
        assert "".join(d.tool_arguments for d in mine) == call.arguments
    # Nothing of the markup ever leaked into content, even half-written.
    assert not any("<" in d.content for d in deltas)
