"""Engine events → llama-cpp-python's completion objects (which its chat handlers convert).

Shapes follow ``Llama.create_completion`` exactly (``text_completion``
objects, a final chunk with empty text and the finish reason, the
``logprobs`` object of tokens/offsets/logprobs/top-logprob dicts), so
``_convert_completion_to_chat`` and the tool-call converters work unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from workers.inference.http._record import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionUsage,
    RequestRecord,
    TextCompletion,
    Timings,
    TokenLogprob,
    TokenProbs,
)
from workers.inference.http.dialects._llama_server import build_info
from workers.inference.llama import LlamaModel

Event = tuple[Any, ...]  # the engine's queue items: ("t", text, logprob, timings, ids), ("d", reason, timings, final)


def piece_text(piece: bytes) -> str:
    """A candidate token's text as llama-server writes it: a character its piece only begins is
    cut off (``validate_utf8``), other invalid bytes become U+FFFD (its JSON's ``replace``)."""
    for i in range(1, min(4, len(piece)) + 1):
        c = piece[-i]
        if (c & 0xE0 == 0xC0 and i < 2) or (c & 0xF0 == 0xE0 and i < 3) or (c & 0xF8 == 0xF0 and i < 4):
            piece = piece[:-i]
            break
    return piece.decode("utf-8", errors="replace")


class CompletionShaper:
    """Builds the chunks or the whole response of one completion."""

    def __init__(
        self,
        id_: str,
        created: int,
        model: str,
        n_prompt: int,
        llm: LlamaModel,
        native_probs: list[TokenProbs] | None = None,
        native_tokens: list[int] | None = None,
    ) -> None:
        self.id, self.created, self.model = id_, created, model
        self.n_prompt = n_prompt
        self.llm = llm
        self._offset = 0
        self.native_probs = native_probs  # llama-server's completion_probabilities, one entry per token
        self.native_tokens = native_tokens  # the streamed tokens' ids, in order (llama-server's chunk ``tokens``)

    def _chunk(self, text: str, logprobs: CompletionLogprobs | None, finish: str | None) -> TextCompletion:
        choice: CompletionChoice = {"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": build_info(),
            "choices": [choice],
        }

    def _usage(self, timings: Timings) -> CompletionUsage:
        n = int(timings.get("predicted_n", 0))
        return {
            "prompt_tokens": self.n_prompt,
            "completion_tokens": n,
            "total_tokens": self.n_prompt + n,
            "prompt_tokens_details": {"cached_tokens": int(timings.get("cache_n", 0))},
        }

    def _logprobs(self, lp: tuple[int, float, list[int], list[float]] | None, sent: str) -> CompletionLogprobs | None:
        """``sent``: the text this token released, llama-server's ``text_to_send`` (its ``token``:
        a character split over byte tokens is whole in the entry that completes it, and the
        entries' tokens joined are the reply's text)."""
        if lp is None:
            return None
        token, chosen, top, top_lp = lp
        token_str = sent
        tops = {piece_text(self.llm.piece(t)): v for t, v in zip(top, top_lp, strict=True)}
        tops[token_str] = chosen
        entry: TokenProbs = {
            **self._native(token, chosen),
            "token": sent,
            "top_logprobs": [self._native(t, v) for t, v in zip(top, top_lp, strict=True)],
        }
        if self.native_probs is not None:
            self.native_probs.append(entry)
        # OpenAI's legacy fields (what its clients parse) and llama-server's ``content`` entries
        out: CompletionLogprobs = {
            "tokens": [token_str],
            "text_offset": [self._offset],
            "token_logprobs": [chosen],
            "top_logprobs": [tops],
            "content": [entry],
        }
        self._offset += len(sent)
        return out

    def _native(self, token: int, logprob: float) -> TokenLogprob:
        piece = self.llm.piece(token)
        return {"id": token, "token": piece_text(piece), "bytes": list(piece), "logprob": logprob}

    def chunks(
        self, events: Iterator[Event], head: str, suffix: str, result: RequestRecord
    ) -> Iterator[TextCompletion]:
        """Stream chunks; ``result`` receives ``timings`` and ``usage`` before the last one."""
        if head:
            self._offset = len(head)
            yield self._chunk(head, None, None)
        for ev in events:
            if ev[0] == "p":  # llama-server's return_progress: an empty chunk with the prompt's progress
                progress = self._chunk("", None, None)
                progress["prompt_progress"] = ev[1]
                yield progress
                continue
            if ev[0] == "t":
                chunk = self._chunk(ev[1], self._logprobs(ev[2], ev[1]), None)
                if ev[3] is not None:  # timings_per_token
                    chunk["timings"] = ev[3]
                if self.native_tokens is not None:
                    self.native_tokens += ev[4]
                yield chunk
                continue
            if suffix:
                yield self._chunk(suffix, None, None)
            result["timings"], result["usage"], result["final"] = ev[2], self._usage(ev[2]), ev[3]
            last = self._chunk("", None, ev[1])
            last["usage"] = result["usage"]  # llama-server: usage on the last
            yield last

    def whole(self, events: Iterator[Event], head: str, suffix: str, result: RequestRecord) -> TextCompletion:
        """The non-streaming response."""
        texts = [head]
        self._offset = len(head)
        merged: CompletionLogprobs | None = None
        finish, timings, final = "stop", Timings(), None
        for ev in events:
            if ev[0] == "d":
                finish, timings, final = ev[1], ev[2], ev[3]
                break
            if ev[0] == "p":
                continue  # progress is for streams
            texts.append(ev[1])
            lp = self._logprobs(ev[2], ev[1])
            if lp is not None:
                merged = merged or {
                    "tokens": [],
                    "text_offset": [],
                    "token_logprobs": [],
                    "top_logprobs": [],
                    "content": [],
                }
                merged["tokens"] += lp["tokens"]
                merged["text_offset"] += lp["text_offset"]
                merged["token_logprobs"] += lp["token_logprobs"]
                merged["top_logprobs"] += lp["top_logprobs"]
                merged["content"] += lp["content"]
        texts.append(suffix)
        result["timings"], result["usage"] = timings, self._usage(timings)
        if final:  # the engine's final info (a request always ends with it)
            result["final"] = final
        out = self._chunk("".join(texts), merged, finish)
        out["usage"] = result["usage"]
        return out


def with_final_fields(
    chunks: Iterator[TextCompletion], result: RequestRecord, include_usage: bool
) -> Iterator[TextCompletion]:
    """A streamed completion's chunks with llama-server's ``timings`` (from ``result``, the finished
    request's) on the last one, after an OpenAI usage chunk if asked for."""
    for chunk in chunks:
        choices = chunk["choices"]
        if not (choices and choices[0]["finish_reason"] is not None):
            yield chunk
            continue
        if not include_usage:
            yield {**chunk, "timings": result.get("timings", {})}
            continue
        yield chunk
        yield {
            "id": chunk["id"],
            "object": chunk["object"],
            "created": chunk["created"],
            "model": chunk["model"],
            "choices": [],
            "usage": result["usage"],
            "timings": result.get("timings", {}),
        }
