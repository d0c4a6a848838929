"""OpenAI's audio transcriptions (``POST /v1/audio/transcriptions``) over the chat path, as llama-server serves it.

The request is OpenAI's multipart form: the sound in the ``file`` part, and text
fields (``model``, ``prompt``, ``language``, ``response_format``, ``stream``,
``max_tokens``, ``temperature``). llama-server (``convert_transcriptions_to_chatcmpl``)
turns it into one user message, ``prompt`` (default "Transcribe audio to text"), then
`` (language: X)`` when given, then the media marker, and runs it as a chat. The
answer (``to_json_oaicompat_asr``) is ``{"type": "transcript.text.done", "text", "usage"}``;
a stream sends ``transcript.text.delta`` events, that answer, then ``[DONE]``.
Refusals in its words: no audio projector (501), no ``file`` part, a
``response_format`` other than ``json`` (400).
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import urllib.parse
from collections.abc import Iterator
from typing import TypedDict

from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject
from workers.inference.http._record import CachedTokens
from workers.inference.http.chat import ChatRun
from workers.inference.http.dialects._requests import parse_json_object

ASR_PROMPT = "Transcribe audio to text"  # common_chat_get_asr_prompt (LFM2's template aside)
NO_AUDIO = "The current model does not support audio input."


def parse_form(content_type: str, raw: bytes) -> tuple[dict[str, str], dict[str, bytes]]:
    """A request body's text fields and files: a ``multipart/form-data`` form, or an urlencoded
    form's or a JSON object's members (which carry no file)."""
    if content_type.lower().startswith("application/x-www-form-urlencoded"):
        return dict(urllib.parse.parse_qsl(raw.decode("utf-8", "replace"))), {}
    if not content_type.lower().startswith("multipart/form-data"):
        body = parse_json_object(raw or b"{}")
        return {k: v if isinstance(v, str) else str(v) for k, v in body.items()}, {}
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
    if not message.is_multipart():
        raise ApiError(400, "malformed multipart/form-data body")
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        data = part.get_payload(decode=True)
        data = data if isinstance(data, bytes) else b""
        if part.get_filename() is not None:
            files[name] = data
        else:
            fields[name] = data.decode("utf-8", "replace")
    return fields, files


def _number(fields: dict[str, str], key: str, kind: type[int] | type[float]) -> int | float:
    try:
        return kind(fields[key])
    except ValueError:
        raise ApiError(400, f"'{key}' must be a number") from None


def transcription_chat(fields: dict[str, str], files: dict[str, bytes]) -> JsonObject:
    """The chat request a transcription is (``convert_transcriptions_to_chatcmpl``)."""
    if "file" not in files:
        raise ApiError(400, "No input file found for transcription")
    if fields.get("response_format", "json") != "json":
        raise ApiError(400, "Only 'json' response_format is supported for transcription")
    prompt = fields.get("prompt") or ASR_PROMPT
    if fields.get("language"):
        prompt += f" (language: {fields['language']})"
    audio: JsonObject = {"type": "input_audio", "input_audio": {"data": base64.b64encode(files["file"]).decode()}}
    body: JsonObject = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}, audio]}],
        "stream": fields.get("stream", "false") == "true",
    }
    if "max_tokens" in fields:
        body["max_tokens"] = _number(fields, "max_tokens", int)
    if "temperature" in fields:
        body["temperature"] = _number(fields, "temperature", float)
    return body


class TranscriptUsage(TypedDict):
    type: str
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: CachedTokens


class TranscriptDone(TypedDict):
    type: str
    text: str
    usage: TranscriptUsage


class Transcription:
    """Shapes one chat run as OpenAI's transcription, or its stream of events."""

    def __init__(self, run: ChatRun) -> None:
        self.run = run

    def _done(self, text: str) -> TranscriptDone:
        run = self.run
        usage: TranscriptUsage = {
            "type": "tokens",
            "input_tokens": run.n_prompt,
            "output_tokens": run.n_predicted,
            "total_tokens": run.n_prompt + run.n_predicted,
            "input_tokens_details": {"cached_tokens": run.n_cached},
        }
        return {"type": "transcript.text.done", "text": text, "usage": usage}

    def whole(self) -> TranscriptDone:
        return self._done(self.run.run().content or "")

    def events(self) -> Iterator[dict[str, str] | TranscriptDone]:
        for deltas, _ in self.run.deltas():
            for d in deltas:
                if d.content:
                    yield {"type": "transcript.text.delta", "delta": d.content}
        yield self._done(self.run.message.content or "")
