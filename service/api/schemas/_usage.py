"""``GET /usage``: requests, tokens and durations per key, model, day or hour, from the log."""

from __future__ import annotations

import msgspec


class UsageRowView(msgspec.Struct, frozen=True):
    """One group's usage. ``prompt_tokens`` (tokens in) counts the prompt as llama-server does, cached
    tokens included; ``errors``: answers with status >= 400; ``p50_ms``/``p95_ms``: nearest-rank
    percentiles of the duration (null without requests)."""

    group: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None


class UsageView(msgspec.Struct, frozen=True):
    """The sums per group (``rows``, empty without ``group_by``) and over all of them (``total``), for
    the filters as applied: ``key`` is the caller's own name for a key that sees only its own usage."""

    group_by: str | None
    key: str | None
    model: str | None
    since: str | None
    until: str | None
    rows: list[UsageRowView]
    total: UsageRowView
