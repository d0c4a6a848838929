"""llama-server's ``__verbose``: an OpenAI answer that carries its native ``/completion`` result.

A request's ``verbose`` (default: the worker's ``--verbose``, llama-server's ``verbosity > 9``,
``server-schema.cpp``) adds ``__verbose`` to OpenAI's chat and completion answers
(``server-task.cpp``): the final result's ``to_json_non_oaicompat`` on the whole answer, before
``timings``; when streamed, on each completion chunk (the partial result's) and on a chat's
finishing chunk (its final result's first delta). Its ``prompt`` is the prompt's tokens
detokenized with their special tokens (``<s>`` and all), which is what llama.cpp's chat-template
tests read back. Anthropic, Responses and the native routes never carry it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject
from workers.inference.http._record import RequestRecord
from workers.inference.http.chat import ChatRun
from workers.inference.http.dialects._native_completion import NativeCompletion, _native_whole, native_chunks

KEY = "__verbose"


def wants_verbose(body: JsonObject, default: bool) -> bool:
    """The request's ``verbose``, else the worker's default; a 400 for anything but a boolean."""
    value = body.get("verbose", default)
    if not isinstance(value, bool):
        raise ApiError(400, "'verbose' must be a boolean")
    return value


def detokenized(llm: Any, tokens: list[int]) -> str:
    """``common_detokenize(ctx, tokens, special=true)``: special tokens rendered as their text, media
    positions (no token) left out, as ``server_tokens::detokenize`` does."""
    ids = [t for t in tokens if t >= 0]
    arr = (ctypes.c_int32 * len(ids))(*ids)
    size = max(64, 8 * len(ids))
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = llm.lc.llama_detokenize(llm.vocab, arr, len(ids), buf, size, False, True)
        if n >= 0:
            return buf.raw[:n].decode("utf-8", errors="replace")
        size = -n
    return ""


def _native(text: str, reason: str | None, model: str, record: RequestRecord, *, stream: bool) -> NativeCompletion:
    """The final result as llama-server's native ``/completion`` writes it, with the detokenized prompt."""
    return _native_whole("" if stream else text, reason, model, record, stream=stream)


def _before_timings(answer: Any, native: NativeCompletion) -> dict[str, Any]:
    """``answer`` with ``__verbose`` added where llama-server puts it: after ``id``, before ``timings``."""
    out = {k: v for k, v in answer.items() if k != "timings"}
    out[KEY] = native
    if "timings" in answer:
        out["timings"] = answer["timings"]
    return out


def verbose_chat(answer: Any, run: ChatRun, model: str, *, stream: bool) -> Any:
    """A chat's ``chat.completion`` with ``__verbose``, or its chunks with it on the finishing one."""
    if not stream:
        return _before_timings(answer, _native(run.text, run.finish_reason, model, run.result, stream=False))
    return _finishing_chunk_verbose(answer, run, model)


def _finishing_chunk_verbose(chunks: Iterator[Any], run: ChatRun, model: str) -> Iterator[Any]:
    for chunk in chunks:
        choices = chunk["choices"]
        if choices and choices[0]["finish_reason"] is not None:
            chunk = {**chunk, KEY: _native("", run.finish_reason, model, run.result, stream=True)}
        yield chunk


def verbose_completion(answer: Any, record: RequestRecord, verbose: bool, *, stream: bool) -> Any:
    """A ``text_completion`` with ``__verbose``, or its chunks each with theirs (a partial result's,
    then the final one's); ``answer`` itself unless ``verbose``."""
    if not verbose:
        return answer
    if not stream:
        choice = answer["choices"][0]
        return _before_timings(
            answer, _native(choice["text"], choice["finish_reason"], answer["model"], record, stream=False)
        )
    return _each_chunk_verbose(answer, record)


def _each_chunk_verbose(chunks: Iterator[Any], record: RequestRecord) -> Iterator[Any]:
    seen: list[Any] = []

    def tapped() -> Iterator[Any]:
        for chunk in chunks:
            seen.append(chunk)
            yield chunk

    for native in native_chunks(tapped(), record):  # one native object for each chunk, in order
        chunk = seen.pop()
        yield {**chunk, KEY: native}
