"""A completion's ``logit_bias`` as token ids, as llama-server reads it."""

from __future__ import annotations

from typing import Any

from workers.inference.llama import LlamaModel


def logit_bias_ids(
    llm: LlamaModel, bias: dict[Any, float] | list[tuple[int | str, float]] | None, *, ignore_eos: bool
) -> tuple[tuple[int, float], ...]:
    """Token ids and biases: text keys tokenized (each of their tokens biased), and with
    ``ignore_eos`` every end-of-generation token banned, as llama-server does."""
    pairs = list(bias.items()) if isinstance(bias, dict) else list(bias or [])
    out: list[tuple[int, float]] = []
    for key, value in pairs:
        if isinstance(key, str) and not key.lstrip("-").isdigit():
            toks = llm.tokenize_whole(key.encode("utf-8"), add_special=False, parse_special=False)
            out += [(t, float(value)) for t in toks]
        else:
            out.append((int(key), float(value)))
    if ignore_eos:
        out += [(t, float("-inf")) for t in llm.eog_tokens()]
    return tuple(out)
