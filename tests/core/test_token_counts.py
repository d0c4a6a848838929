"""``token_counts``: the tokens each dialect's answer states, read as llama-server counts them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from service.core.token_counts import NO_COUNTS, StreamTokens, TokenCounts, body_counts, counted, counts_of


def sse(*events: Any, event_names: bool = False) -> bytes:
    """A stream as a worker sends it: ``data:`` lines (Anthropic's with ``event:`` lines) and ``[DONE]``."""
    out = b""
    for item in events:
        if event_names:
            out += f"event: {item.get('type', 'x')}\n".encode()
        out += b"data: " + json.dumps(item).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def read_stream(stream: bytes, size: int) -> TokenCounts:
    tokens = StreamTokens()
    for at in range(0, len(stream), size):
        tokens.feed(stream[at : at + size])
    return tokens.close()


OPENAI_CHAT = {
    "choices": [{"message": {"content": "hi"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, "prompt_tokens_details": {}},
    "timings": {"prompt_n": 4, "cache_n": 8, "predicted_n": 3},
}


class TestWholeAnswers:
    @pytest.mark.parametrize(
        ("answer", "want"),
        [
            (OPENAI_CHAT, TokenCounts(12, 3)),
            ({"usage": {"prompt_tokens": 7, "completion_tokens": 2}}, TokenCounts(7, 2)),
            ({"content": "x", "tokens_evaluated": 9, "tokens_predicted": 5}, TokenCounts(9, 5)),  # /completion
            ({"timings": {"prompt_n": 2, "cache_n": 6, "predicted_n": 4}}, TokenCounts(8, 4)),
            ({"data": [], "usage": {"prompt_tokens": 6, "total_tokens": 6}}, TokenCounts(6, 0)),  # embeddings
            ({"results": [], "usage": {"prompt_tokens": 11, "total_tokens": 11}}, TokenCounts(11, 0)),  # rerank
            ({"type": "response", "usage": {"input_tokens": 10, "output_tokens": 4}}, TokenCounts(10, 4)),
        ],
        ids=["openai", "usage-only", "completion", "timings", "embeddings", "rerank", "responses"],
    )
    def test_each_dialect(self, answer: dict[str, Any], want: TokenCounts) -> None:
        """Each dialect's own field names give the same two numbers."""
        assert body_counts(json.dumps(answer).encode()) == want

    def test_anthropic_adds_the_cached_prompt_back(self) -> None:
        """Anthropic's ``input_tokens`` leaves out the cache read; llama-server's prompt count has it."""
        usage = {"input_tokens": 3, "cache_read_input_tokens": 9, "output_tokens": 5}
        assert body_counts(json.dumps({"type": "message", "usage": usage}).encode()) == TokenCounts(12, 5)

    def test_a_list_of_answers_sums(self) -> None:
        """Several completions in one answer (a list of prompts): each one's tokens count."""
        body = [{"tokens_evaluated": 3, "tokens_predicted": 1}, {"tokens_evaluated": 4, "tokens_predicted": 2}]
        assert body_counts(json.dumps(body).encode()) == TokenCounts(7, 3)

    def test_predict_sums_its_predictions(self) -> None:
        """Vertex AI's ``/predict``: one answer per instance, summed; an instance's error counts nothing."""
        body = {"predictions": [OPENAI_CHAT, {"error": {"message": "no"}}, {"usage": {"prompt_tokens": 1}}]}
        assert body_counts(json.dumps(body).encode()) == TokenCounts(13, 3)

    @pytest.mark.parametrize(
        "body",
        [
            b"",
            b"not json",
            b'{"usage": 3}',
            b'[{"embedding": [1.0]}]',
            b'{"usage": {"prompt_tokens": -1}}',
            b"[" * 5000,
        ],
    )
    def test_nothing_stated_is_no_counts(self, body: bytes) -> None:
        """An answer without a count (native /embedding, an error, garbage) says nothing, never a guess."""
        assert body_counts(body) == NO_COUNTS

    def test_booleans_are_not_counts(self) -> None:
        assert counts_of({"usage": {"prompt_tokens": True, "completion_tokens": False}}) == NO_COUNTS


class TestStreams:
    def test_openai_chat_stream_without_usage_reads_the_timings(self) -> None:
        """No ``include_usage``: llama-server's last chunk still carries ``timings``."""
        stream = sse(
            {"choices": [{"delta": {"content": "a"}}]},
            {"choices": [{"delta": {}}], "timings": {"prompt_n": 5, "cache_n": 2, "predicted_n": 2}},
        )
        assert read_stream(stream, 7) == TokenCounts(7, 2)

    def test_openai_chat_stream_with_usage(self) -> None:
        stream = sse({"choices": [{"delta": {"content": "a"}}]}, {"choices": [], "usage": OPENAI_CHAT["usage"]})
        assert read_stream(stream, 3) == TokenCounts(12, 3)

    def test_anthropic_stream_takes_the_prompt_from_message_start_and_output_from_message_delta(self) -> None:
        start_usage = {"input_tokens": 4, "cache_read_input_tokens": 6, "output_tokens": 0}
        stream = sse(
            {"type": "message_start", "message": {"usage": start_usage}},
            {"type": "content_block_delta", "delta": {"text": "hi"}},
            {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 8}},
            event_names=True,
        )
        assert read_stream(stream, 5) == TokenCounts(10, 8)

    def test_responses_stream_reads_response_completed(self) -> None:
        usage = {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12}
        stream = sse(
            {"type": "response.created", "response": {"usage": None}},
            {"type": "response.completed", "response": {"usage": usage}},
        )
        assert read_stream(stream, 11) == TokenCounts(9, 3)

    def test_per_token_timings_keep_the_largest(self) -> None:
        """``timings_per_token``: each step states the counts so far; the last (largest) wins."""
        steps = [{"timings": {"prompt_n": 3, "predicted_n": n}} for n in (1, 2, 3)]
        assert read_stream(sse(*steps), 4) == TokenCounts(3, 3)

    def test_last_line_without_newline_is_read_at_close(self) -> None:
        tokens = StreamTokens()
        tokens.feed(b'data: {"tokens_evaluated": 2, "tokens_predicted": 1}')
        assert tokens.counts == NO_COUNTS
        assert tokens.close() == TokenCounts(2, 1)

    def test_an_overlong_partial_line_is_dropped(self) -> None:
        """A line longer than any count's is not buffered without end."""
        tokens = StreamTokens()
        tokens.feed(b'data: {"usage": {"prompt_tokens": 1, "pad": "' + b"x" * (1 << 21))
        tokens.feed(b'"}}\n')
        assert tokens.close() == NO_COUNTS


def test_a_replayed_stream_is_not_charged_again() -> None:
    """``GET /v1/stream`` replays what the generating request was charged for."""
    assert counted("/v1/stream", TokenCounts(5, 5)) == NO_COUNTS
    assert counted("/v1/chat/completions", TokenCounts(5, 5)) == TokenCounts(5, 5)
