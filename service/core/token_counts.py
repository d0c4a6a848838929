"""The tokens a worker's answer says it used (issue 34): prompt and completion, as llama-server counts
them, read from whichever dialect answered, for ``request_completed`` (usage, rate limits).

- OpenAI chat/completions, embeddings, rerank: ``usage.prompt_tokens``/``completion_tokens``;
- Anthropic Messages and Responses: ``usage.input_tokens``/``output_tokens`` (in a stream: on
  ``message_start``'s ``message``, ``message_delta``, and ``response.completed``'s ``response``);
- llama.cpp's ``/completion``: ``tokens_evaluated``/``tokens_predicted``;
- Vertex AI's ``/predict``: the sum over its ``predictions``;
- any of them with ``timings``: ``prompt_n + cache_n`` and ``predicted_n`` (a stream's last chunk).

The prompt count includes the tokens taken from the cache (llama-server's ``usage.prompt_tokens``;
Anthropic's ``input_tokens`` plus its ``cache_read_input_tokens`` and ``cache_creation_input_tokens``).
A stream is read as it passes (:class:`StreamTokens`), decoding only the events that carry a count.
Pure: stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_MARKERS = (b'"usage"', b'"timings"', b'"tokens_predicted"')
_ANTHROPIC_CACHED = ("cache_read_input_tokens", "cache_creation_input_tokens")
_MAX_LINE = 1 << 20  # a partial line longer than this is not a count's: dropped


@dataclass(frozen=True, slots=True)
class TokenCounts:
    prompt: int | None = None
    completion: int | None = None

    def merged(self, other: TokenCounts) -> TokenCounts:
        """The larger of each count (a stream states them on different events, some more than once)."""
        return TokenCounts(_larger(self.prompt, other.prompt), _larger(self.completion, other.completion))


NO_COUNTS = TokenCounts()

REPLAY_ROUTES = frozenset({"/v1/stream"})
"""Routes that replay what a model already generated (llama-server's resumable streams)."""


def counted(route: str, counts: TokenCounts) -> TokenCounts:
    """The counts a request on ``route`` is charged: none for a replay, whose tokens the request that
    generated them was charged (a client resuming a stream twice must not pay three times)."""
    return NO_COUNTS if route in REPLAY_ROUTES else counts


def _larger(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _int(value: Any) -> int | None:  # Any: a JSON value
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _from_usage(usage: Mapping[str, Any]) -> TokenCounts:  # Any: JSON
    prompt = _int(usage.get("prompt_tokens"))
    if prompt is None:
        prompt = _int(usage.get("input_tokens"))
        if prompt is not None:  # Anthropic's leaves out the cached part: llama-server's count has it
            prompt += sum(_int(usage.get(part)) or 0 for part in _ANTHROPIC_CACHED)
    completion = _int(usage.get("completion_tokens"))
    if completion is None:
        completion = _int(usage.get("output_tokens"))
    if prompt is not None and completion is None and "total_tokens" in usage:
        completion = 0  # embeddings, rerank: a prompt only
    return TokenCounts(prompt, completion)


def _from_timings(timings: Mapping[str, Any]) -> TokenCounts:  # Any: JSON
    processed, cached = _int(timings.get("prompt_n")), _int(timings.get("cache_n")) or 0
    prompt = None if processed is None else processed + cached
    return TokenCounts(prompt, _int(timings.get("predicted_n")))


def counts_of(obj: Any) -> TokenCounts:  # Any: one decoded JSON answer or stream event
    """The counts one JSON object states (nothing for anything else)."""
    if not isinstance(obj, dict):
        return NO_COUNTS
    found = NO_COUNTS
    for holder in (obj, obj.get("message"), obj.get("response")):  # Anthropic's message_start, Responses' events
        if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
            found = found.merged(_from_usage(holder["usage"]))
    if isinstance(obj.get("timings"), dict):
        found = found.merged(_from_timings(obj["timings"]))
    evaluated, predicted = _int(obj.get("tokens_evaluated")), _int(obj.get("tokens_predicted"))
    if evaluated is not None or predicted is not None:
        found = found.merged(TokenCounts(evaluated, predicted))
    return found


def body_counts(body: bytes) -> TokenCounts:
    """The counts of a whole (non-streamed) JSON answer; a list (several completions) sums them."""
    if not any(marker in body for marker in _MARKERS):
        return NO_COUNTS
    try:
        decoded = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return NO_COUNTS
    if isinstance(decoded, dict) and isinstance(decoded.get("predictions"), list):
        decoded = decoded["predictions"]  # Vertex AI's /predict: one answer per instance
    if isinstance(decoded, list):
        return _summed([counts_of(item) for item in decoded])
    return counts_of(decoded)


def _summed(parts: list[TokenCounts]) -> TokenCounts:
    prompts = [p.prompt for p in parts if p.prompt is not None]
    completions = [p.completion for p in parts if p.completion is not None]
    return TokenCounts(sum(prompts) if prompts else None, sum(completions) if completions else None)


class StreamTokens:
    """Reads the counts off an SSE stream chunk by chunk (chunks may split lines anywhere)."""

    def __init__(self) -> None:
        self._partial = b""
        self.counts = NO_COUNTS

    def feed(self, chunk: bytes) -> None:
        data = self._partial + chunk if self._partial else chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > _MAX_LINE:
            self._partial = b""
        for line in lines:
            self._line(line)

    def close(self) -> TokenCounts:
        """The counts seen, the last line included even without its newline."""
        if self._partial:
            self._line(self._partial)
            self._partial = b""
        return self.counts

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:") or not any(marker in line for marker in _MARKERS):
            return
        try:
            decoded = json.loads(line[5:])
        except (ValueError, UnicodeDecodeError, RecursionError):
            return
        self.counts = self.counts.merged(counts_of(decoded))
