"""Audio in chats, ``/completion`` and OpenAI's transcriptions on a real worker with a real audio
projector (``--mmproj``: devtools/tiny_audio_mmproj.py, Ultravox's layout).

libmtmd decodes the WAV itself (``mtmd_helper_bitmap_init_from_buf``), computes its log-mel
spectrogram and encodes it with the Whisper-style encoder. The random weights make no sense of
a sound, but different sounds give different embeddings: what is asserted is that the audio is
evaluated (its tokens counted as llama-server counts them, the answer depending on it) and
refused as llama-server refuses what it cannot take.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.tiny_audio_mmproj import audio_tokens, wav_bytes, write_tiny_audio_mmproj
from devtools.tiny_gguf import write_tiny_gguf
from devtools.tiny_mmproj import png_bytes
from tests.workers.conftest import WorkerProc, started_worker
from tests.workers.inference.http.media_chat import media_chat

TONE, HIGH = wav_bytes(0.5, 440.0), wav_bytes(0.5, 1760.0)
N_AUDIO = audio_tokens(0.5)
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProc]:
    """A worker with the tiny model and its audio projector."""
    tmp = tmp_path_factory.mktemp("audio")
    model, projector = write_tiny_gguf(tmp / "tiny.gguf"), write_tiny_audio_mmproj(tmp / "mmproj.gguf")
    extra = ["--mmproj", str(projector), "--seed", "7"]
    with started_worker(tmp, model, "audio", extra) as w:
        yield w


def _audio(data: bytes, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


_chat = functools.partial(media_chat, text="listen", max_tokens=4, cache_prompt=False)


def _first_logprobs(answer: dict[str, Any]) -> list[float]:
    return [t["logprob"] for t in answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]]


def _transcribe(
    url: str, route: str = "/v1/audio/transcriptions", status: int = 200, *, file: bytes | None = TONE, **fields: str
) -> httpx.Response:
    files = {"file": ("sound.wav", file, "audio/wav")} if file is not None else None
    answer = httpx.post(
        url + route,
        data={"model": "whisper-1", "max_tokens": "3", "temperature": "0", **fields},
        files=files,
        timeout=60,
    )
    assert answer.status_code == status, answer.text
    return answer


def test_an_audio_part_is_evaluated_and_counted_as_llama_server_counts_it(worker: WorkerProc) -> None:
    """llama-server's ``input_audio`` part: the prompt grows by the sound's tokens, the answer depends
    on the sound (another tone, other logits; the same, the same), ``format`` is not checked (as
    llama-server: libmtmd tells WAV, MP3 and FLAC apart by their bytes); ``/props`` says audio."""
    url = worker.endpoint
    text = _chat(url)
    tone = _chat(url, _audio(TONE), logprobs=True, top_logprobs=3)
    high = _chat(url, _audio(HIGH), logprobs=True, top_logprobs=3)
    assert tone["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"] + N_AUDIO
    assert tone["timings"]["prompt_n"] == tone["usage"]["prompt_tokens"], "every prompt token evaluated"
    assert _first_logprobs(tone) != _first_logprobs(high), "another sound, other logits"
    again = _chat(url, _audio(TONE, fmt="mp3"), logprobs=True, top_logprobs=3)
    assert _first_logprobs(again) == _first_logprobs(tone)
    long = _chat(url, _audio(wav_bytes(31.0, 440.0)))
    assert long["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"] + audio_tokens(31.0), "two chunks"
    props = httpx.get(url + "/props", timeout=30).json()
    assert props["modalities"] == {"vision": False, "video": False, "audio": True}


def test_completion_multimodal_data_takes_audio(worker: WorkerProc) -> None:
    """llama-server's ``/completion`` prompt ``{"prompt_string", "multimodal_data"}`` with a WAV file."""
    url = worker.endpoint
    marker = httpx.get(url + "/props", timeout=30).json()["media_marker"]

    def complete(text: str, *files: bytes) -> dict[str, Any]:
        prompt = {"prompt_string": text, "multimodal_data": [base64.b64encode(f).decode() for f in files]}
        answer = httpx.post(
            url + "/completion", json={"prompt": prompt, "n_predict": 2, "cache_prompt": False}, timeout=60
        )
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
        return result

    plain = complete("hear: <|im_end|>")
    heard = complete(f"hear: {marker}<|im_end|>", TONE)
    assert heard["timings"]["prompt_n"] == plain["timings"]["prompt_n"] + N_AUDIO


def test_what_the_projector_cannot_take_gets_llama_servers_400(worker: WorkerProc) -> None:
    """An image to an audio-only projector, a video (llama-server takes video only with a vision
    projector: ``mtmd_helper_support_video``), and bytes that are no sound: llama-server's words;
    it serves on."""
    url = worker.endpoint

    def refused(part: dict[str, Any]) -> str:
        error: dict[str, Any] = _chat(url, part, status=400)["error"]
        assert error["type"] == "invalid_request_error"
        return str(error["message"])

    hint = " input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
    image = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png_bytes(8, 8, (9, 9, 9))).decode()},
    }
    assert refused(image) == "image" + hint
    for kind in ("video_url", "input_video"):
        assert refused({"type": kind, kind: {"url": "data:video/mp4;base64,AAAA"}}) == "video" + hint
    assert refused(_audio(b"RIFF but not a wave file at all")) == "Failed to load image or audio file"
    assert refused({"type": "input_audio", "input_audio": {"data": "!!!", "format": "wav"}}) == "Invalid base64 value"
    assert _chat(url, _audio(TONE))["usage"]["prompt_tokens"] > N_AUDIO


def test_transcriptions_answer_openais_shape(worker: WorkerProc) -> None:
    """``POST /v1/audio/transcriptions`` (and ``/audio/transcriptions``): a multipart form becomes
    llama-server's chat ("Transcribe audio to text" and the sound); the answer is its
    ``transcript.text.done`` with ``text`` and token ``usage``. A ``prompt`` replaces the default,
    ``language`` is appended to it; the sound is evaluated (another one, another prompt)."""
    url = worker.endpoint
    done = _transcribe(url).json()
    assert done["type"] == "transcript.text.done" and isinstance(done["text"], str)
    usage = done["usage"]
    assert usage["type"] == "tokens" and 0 < usage["output_tokens"] <= 3
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens"] > N_AUDIO and set(usage["input_tokens_details"]) == {"cached_tokens"}
    same = _transcribe(url, "/audio/transcriptions").json()
    assert same["text"] == done["text"], "the same sound, the same words (temperature 0)"
    turn = [{"type": "text", "text": "Transcribe audio to text"}, _audio(TONE)]
    body = {"messages": [{"role": "user", "content": turn}], "max_tokens": 3, "temperature": 0}
    chat = httpx.post(url + "/v1/chat/completions", json=body, timeout=60).json()
    assert chat["usage"]["prompt_tokens"] == usage["input_tokens"], "the same chat as llama-server makes"
    assert chat["choices"][0]["message"]["content"] == done["text"]
    worded = _transcribe(url, prompt="Write down what you hear", language="en").json()["usage"]["input_tokens"]
    assert worded > usage["input_tokens"], "a longer prompt, and the language after it"


def test_a_streamed_transcription_sends_deltas_then_the_whole_text(worker: WorkerProc) -> None:
    """``stream=true`` (a form field, a string): ``transcript.text.delta`` events, the
    ``transcript.text.done`` answer, then ``[DONE]``, as llama-server streams them."""
    with httpx.stream(
        "POST",
        worker.endpoint + "/v1/audio/transcriptions",
        timeout=60,
        data={"stream": "true", "max_tokens": "3", "temperature": "0"},
        files={"file": ("a.wav", TONE, "audio/wav")},
    ) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"] == "text/event-stream"
        lines = [line[len("data: ") :] for line in answer.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    events = [json.loads(line) for line in lines[:-1]]
    assert [e["type"] for e in events[:-1]] == ["transcript.text.delta"] * (len(events) - 1)
    assert events[-1]["type"] == "transcript.text.done"
    assert "".join(e["delta"] for e in events[:-1]) == events[-1]["text"]
    assert events[-1]["text"] == _transcribe(worker.endpoint).json()["text"]


def test_transcription_refusals_are_llama_servers(worker: WorkerProc) -> None:
    """No ``file`` part, or a ``response_format`` other than ``json``: llama-server's 400s."""
    url = worker.endpoint
    missing = _transcribe(url, status=400, file=None).json()["error"]
    assert missing["message"] == "No input file found for transcription"
    text = _transcribe(url, status=400, response_format="text").json()["error"]
    assert text["message"] == "Only 'json' response_format is supported for transcription"
    as_json = httpx.post(url + "/v1/audio/transcriptions", json={"model": "x"}, timeout=30)
    assert as_json.status_code == 400 and as_json.json()["error"]["message"] == missing["message"]
