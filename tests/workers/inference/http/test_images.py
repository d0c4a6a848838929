"""Images in chats on a real worker with a real projector (``--mmproj``: devtools/tiny_mmproj.py).

The projector's random weights make no sense of a picture, but they turn different
pictures into different embeddings: what is asserted is that the image is evaluated
(its tokens counted as llama-server counts them, the answer depending on it), reused
from the cache only when it is the same picture, refused as llama-server refuses bad
input, and evaluated while another slot streams text.
"""

from __future__ import annotations

import base64
import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import write_tiny_gguf
from devtools.tiny_mmproj import image_tokens, png_bytes, write_tiny_mmproj
from tests.eventually import eventually
from tests.workers.conftest import WorkerProc, started_worker
from tests.workers.inference.http.media_chat import media_chat, serving

RED, BLUE = png_bytes(40, 30, (255, 0, 0)), png_bytes(40, 30, (0, 0, 255))
N_IMAGE = image_tokens()
# What ChatML puts after a user turn's content: <|im_end|> "\n" <|im_start|> "assistant\n", the tiny
# vocabulary's SentencePiece tokenizer adding its space marker after each control token (byte tokens).
TAIL = 1 + 1 + 1 + 1 + 1 + len("assistant\n")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProc]:
    """A worker with two slots, the tiny model and its projector."""
    tmp = tmp_path_factory.mktemp("images")
    # A 2048-token context per slot: room for a text stream long enough to overlap an image chat.
    model, projector = write_tiny_gguf(tmp / "tiny.gguf", n_ctx=4096), write_tiny_mmproj(tmp / "mmproj.gguf")
    (tmp / "slots").mkdir()
    extra = ["--mmproj", str(projector), "--n-parallel", "2", "--seed", "7", "--slot-save-path", str(tmp / "slots")]
    with started_worker(tmp, model, "images", extra) as w:
        yield w


def _image(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()}}


_chat = functools.partial(media_chat, max_tokens=6)


def _first_logprobs(answer: dict[str, Any]) -> list[float]:
    return [t["logprob"] for t in answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]]


def test_an_image_is_evaluated_and_counted_as_llama_server_counts_it(worker: WorkerProc) -> None:
    """The prompt grows by the image's tokens (usage and timings), and the answer depends on the
    picture: another image gives other logits, the same image the same answer."""
    url = worker.endpoint
    text = _chat(url, cache_prompt=False)
    red = _chat(url, _image(RED), cache_prompt=False, logprobs=True, top_logprobs=3)
    blue = _chat(url, _image(BLUE), cache_prompt=False, logprobs=True, top_logprobs=3)
    assert red["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"] + N_IMAGE
    assert red["timings"]["prompt_n"] == red["usage"]["prompt_tokens"], "every prompt token evaluated, image too"
    assert _first_logprobs(red) != _first_logprobs(blue), "another picture, other logits"
    again = _chat(url, _image(RED), cache_prompt=False, logprobs=True, top_logprobs=3)
    assert again["choices"][0]["message"]["content"] == red["choices"][0]["message"]["content"]
    assert _first_logprobs(again) == _first_logprobs(red)
    assert httpx.get(url + "/props", timeout=30).json()["modalities"] == {"vision": True, "video": True, "audio": False}


def test_completion_multimodal_data_with_the_props_marker(worker: WorkerProc) -> None:
    """llama-server's native ``/completion`` prompt ``{"prompt_string", "multimodal_data"}``: one
    ``media_marker`` (from ``/props``) per base64 file; a count that does not match is its 400. The
    slot that holds the image cannot be saved to a file (its stand-in tokens mean nothing elsewhere)."""
    url = worker.endpoint
    marker = httpx.get(url + "/props", timeout=30).json()["media_marker"]
    assert marker.startswith("<__media_") and marker.endswith("__>")

    def complete(text: str, *files: bytes, status: int = 200) -> dict[str, Any]:
        prompt = {"prompt_string": text, "multimodal_data": [base64.b64encode(f).decode() for f in files]}
        answer = httpx.post(
            url + "/completion", json={"prompt": prompt, "n_predict": 2, "cache_prompt": False}, timeout=60
        )
        assert answer.status_code == status, answer.text
        result: dict[str, Any] = answer.json()
        return result

    plain = complete("look: <|im_end|>")  # a control token after the image: no space marker added
    seen = complete(f"look: {marker}<|im_end|>", RED)
    assert seen["timings"]["prompt_n"] == plain["timings"]["prompt_n"] + N_IMAGE
    saved = httpx.post(f"{url}/slots/{seen['id_slot']}?action=save", json={"filename": "img.bin"}, timeout=30)
    assert saved.status_code == 400 and "image tokens" in saved.json()["error"]["message"], saved.text
    assert complete("look: now", RED, status=400)["error"]["message"] == "Failed to tokenize prompt"
    ends = complete(f"look: {marker}", RED, status=400)["error"]["message"]
    assert ends == "the prompt must end with text after its last image"


def test_the_cache_keeps_an_image_only_for_the_same_picture(worker: WorkerProc) -> None:
    """The same picture again reuses the whole prompt but its last token (llama-server's rule);
    another picture reuses the text before it and nothing from the image on."""
    url = worker.endpoint
    before_image = _chat(url, cache_prompt=False)["usage"]["prompt_tokens"] - TAIL
    first = _chat(url, _image(RED))
    second = _chat(url, _image(RED))
    assert second["timings"]["cache_n"] == second["usage"]["prompt_tokens"] - 1
    assert second["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    other = _chat(url, _image(BLUE))
    assert other["timings"]["cache_n"] == before_image, "reused up to the image, not into it"
    assert other["timings"]["prompt_n"] == N_IMAGE + TAIL


def test_bad_media_gets_llama_servers_400(worker: WorkerProc) -> None:
    """llama-server's words (server-common.cpp ``handle_media``, ``process_mtmd_prompt``); the
    worker serves on afterwards."""
    url = worker.endpoint

    def refused(part: dict[str, Any]) -> str:
        error: dict[str, Any] = _chat(url, part, status=400)["error"]
        assert error["type"] == "invalid_request_error"
        return str(error["message"])

    assert refused(_image(b"this is not a picture")) == "Failed to load image or audio file"
    assert refused({"type": "image_url", "image_url": {"url": "!!!"}}) == "Invalid base64 value"
    assert refused({"type": "image_url", "image_url": {"url": "data:text/plain;base64,aGk="}}) == (
        "Invalid uri format: data:text/plain;base64"
    )
    assert refused({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}).startswith("file:// URLs")
    audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(RED).decode(), "format": "wav"}}
    assert refused(audio).startswith("audio input is not supported")  # a vision-only projector
    assert _chat(url, _image(BLUE))["usage"]["prompt_tokens"] > N_IMAGE


def test_an_http_image_url_is_downloaded_as_llama_server_does(worker: WorkerProc, tmp_path: Path) -> None:
    """llama-server fetches ``http(s)`` image URLs itself: the picture from a local web server gives the
    answer its data URI gives; a URL that fails is llama-server's "Failed to download image"."""
    (tmp_path / "red.png").write_bytes(RED)
    with serving(tmp_path) as base:
        fetched = _chat(
            worker.endpoint,
            {"type": "image_url", "image_url": {"url": f"{base}/red.png"}},
            logprobs=True,
            top_logprobs=3,
        )
        missing = _chat(worker.endpoint, {"type": "image_url", "image_url": {"url": f"{base}/gone.png"}}, status=400)
    inline = _chat(worker.endpoint, _image(RED), logprobs=True, top_logprobs=3)
    assert _first_logprobs(fetched) == _first_logprobs(inline)
    assert missing["error"]["message"] == "Failed to download image"


def test_an_image_chat_runs_while_another_slot_streams_text(worker: WorkerProc) -> None:
    """A long text stream in one slot, an image chat in the other: the image's answer is the one it
    gets alone (each slot its own sequence), and the stream still runs after that answer."""
    url = worker.endpoint
    alone = _chat(url, _image(BLUE), cache_prompt=False)
    pieces: list[float] = []
    started, stop = threading.Event(), threading.Event()

    def stream() -> None:
        body = {
            "messages": [{"role": "user", "content": "go on"}],
            "max_tokens": 1500,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as answer:
            for line in answer.iter_lines():
                if line.startswith("data: {"):
                    pieces.append(time.monotonic())
                    started.set()
                if stop.is_set():
                    return  # hanging up cancels the rest

    reader = threading.Thread(target=stream)
    reader.start()
    try:
        assert started.wait(30), "the stream started"
        beside = _chat(url, _image(BLUE), cache_prompt=False)
        answered = time.monotonic()
        eventually(lambda: pieces[-1] > answered, "a text piece after the image's answer", timeout=30)
    finally:
        stop.set()
        reader.join(60)
    assert beside["choices"][0]["message"]["content"] == alone["choices"][0]["message"]["content"]


def test_anthropic_image_blocks_are_evaluated(worker: WorkerProc) -> None:
    """``/v1/messages`` image blocks (base64 sources) reach the projector: more input tokens, which
    ``count_tokens`` counts too."""
    url = worker.endpoint

    def tokens(*blocks: dict[str, Any]) -> int:
        body = {"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, *blocks]}]}
        answer = httpx.post(url + "/v1/messages", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        usage = answer.json()["usage"]
        return int(usage["input_tokens"]) + int(usage["cache_read_input_tokens"])  # Anthropic's: cached apart

    source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(RED).decode()}
    assert tokens({"type": "image", "source": source}) == tokens() + N_IMAGE
    content = [{"type": "text", "text": "hi"}, {"type": "image", "source": source}]
    counted = httpx.post(
        url + "/v1/messages/count_tokens", json={"messages": [{"role": "user", "content": content}]}, timeout=60
    )
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] == tokens({"type": "image", "source": source})


def test_a_projector_that_does_not_load_fails_the_worker(spawn_worker: Any, tiny_gguf: Path) -> None:
    """A model given as its own projector: libmtmd refuses it, the load fails (llama-server does not start)."""
    bad = spawn_worker(tiny_gguf, "--mmproj", str(tiny_gguf))
    failed = bad.wait_event("instance_load_failed", timeout=60)
    assert failed["reason"] == "load_error" and "Failed to load CLIP model" in failed["message"]
    assert bad.wait_exit() != 0
