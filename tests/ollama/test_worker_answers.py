"""The worker's answers as the Ollama routes read them (``service/api/ollama/_upstream.py``): converted
once into Structs, read by attribute. Pure: no service, no worker."""

from __future__ import annotations

import msgspec
import pytest

from service.api.ollama import _translate as t
from service.api.ollama._chat import _Calls
from service.api.ollama._schemas import CalledFunction, ChatChunk, ToolCall
from service.api.ollama._upstream import ToolCallDelta, answer_of


def test_a_native_infill_answer_is_one_completion_choice_with_its_stop_reason() -> None:
    running = answer_of({"content": "ab", "stop": False})
    limited = answer_of({"content": "", "stop": True, "stop_type": "limit", "generation_settings": {"n_ctx": 8}})
    assert [(t.choice_text(c), c.finish_reason) for c in t.choices_of(running)] == [("ab", None)]
    assert [(t.choice_text(c), c.finish_reason) for c in t.choices_of(limited)] == [("", "length")]


def test_an_answer_with_neither_choices_nor_content_has_no_choice() -> None:
    assert t.choices_of(answer_of({"usage": {"prompt_tokens": 3}})) == []
    assert t.choices_of(answer_of({"choices": None, "content": "ignored"})) == []


def test_a_chat_choice_reads_its_delta_or_its_message_and_a_completion_its_text() -> None:
    streamed = answer_of({"choices": [{"delta": {"content": "hi"}, "finish_reason": None}]})
    whole = answer_of({"choices": [{"message": {"content": None, "tool_calls": []}, "finish_reason": "tool_calls"}]})
    completion = answer_of({"choices": [{"text": "x", "finish_reason": "stop"}]})
    assert [t.choice_text(c) for c in t.choices_of(streamed)] == ["hi"]
    assert [t.choice_text(c) for c in t.choices_of(whole)] == [""]
    assert [t.choice_text(c) for c in t.choices_of(completion)] == ["x"]


def test_the_timings_counts_win_and_usage_stands_in_for_a_missing_one() -> None:
    answer = answer_of({"timings": {"prompt_n": 0, "prompt_ms": 2, "predicted_ms": 1.5}, "usage": {"prompt_tokens": 9}})
    usage_only = answer_of({"usage": {"prompt_tokens": 4, "completion_tokens": 6}})
    assert t.counters(answer.timings, answer.usage, 10, 20) == {
        "total_duration": 20,
        "load_duration": 10,
        "prompt_eval_count": 0,
        "prompt_eval_duration": 2_000_000,
        "eval_count": 0,
        "eval_duration": 1_500_000,
    }
    counted = t.counters(usage_only.timings, usage_only.usage, 0, 0)
    assert (counted["prompt_eval_count"], counted["eval_count"]) == (4, 6)


def _deltas(*calls: dict[str, object]) -> list[ToolCallDelta]:
    return msgspec.convert(list(calls), list[ToolCallDelta])


def test_streamed_tool_call_pieces_become_calls_with_object_arguments_in_index_order() -> None:
    calls = _Calls()
    calls.add(
        _deltas(
            {"index": 1, "function": {"name": "b", "arguments": "{}"}},
            {"index": 0, "function": {"name": "get_", "arguments": '{"city": '}},
        )
    )
    calls.add(_deltas({"index": 0, "function": {"name": "weather", "arguments": '"Paris"}'}}))
    assert calls.done() == [
        ToolCall(CalledFunction(name="get_weather", arguments={"city": "Paris"})),
        ToolCall(CalledFunction(name="b", arguments={})),
    ]


@pytest.mark.parametrize(("raw", "kept"), [('{"a": 1}', {"a": 1}), ("not json", {"arguments": "not json"}), (None, {})])
def test_a_calls_arguments_become_an_object_and_broken_json_is_kept_as_it_was(raw: str | None, kept: object) -> None:
    [call] = t.tool_calls_in(_deltas({"function": {"name": "f", "arguments": raw}}))
    assert call == ToolCall(CalledFunction(name="f", arguments=kept))


def test_a_chat_line_with_tool_calls_is_ollamas_json_member_for_member() -> None:
    call = ToolCall(CalledFunction(name="get_weather", arguments={"city": "Paris"}))
    line: ChatChunk = t.chat_line("m", "2026-01-01T00:00:00Z", "", False, tool_calls=[call])
    assert msgspec.json.encode(line) == (
        b'{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"",'
        b'"tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false}'
    )
