"""``llama-server -m FILE`` / ``-hf user/repo``: one model, served whatever a request names, and
llama-server's server-level switches (``--metrics``, ``--no-slots``, ``--sleep-idle-seconds``)."""

from __future__ import annotations

import base64
import contextlib
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_audio_mmproj import audio_tokens, wav_bytes, write_tiny_audio_mmproj
from devtools.tiny_mmproj import image_tokens, png_bytes, write_tiny_mmproj
from tests.dropin.conftest import CHAT, Serve, gguf_repo, models, wait_until
from tests.service_probes import events, wait_for_event

# llama-server's answers, word for word (tools/server/server-context.cpp, server.cpp).
NO_SLOTS = "This server does not support slots endpoint. Start it with `--slots`"
NO_METRICS = "This server does not support metrics endpoint. Start it with `--metrics`"


def _status(svc_url: str, name: str) -> str:
    entry = models_at(svc_url)[name]
    status: Any = entry["status"]
    return str(status["value"] if isinstance(status, dict) else status)


def models_at(url: str) -> dict[str, dict[str, Any]]:
    answer = httpx.get(f"{url}/models", timeout=30)
    answer.raise_for_status()
    return {m["id"]: m for m in answer.json()["data"]}


@pytest.mark.timeout(240)
def test_model_file_is_the_one_model_whatever_a_request_names(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    """``llama-server -m tiny-a.gguf --mmproj P --metrics --no-slots``: an OpenAI client's ``gpt-3.5-turbo``
    and a request naming no model both reach it, images too (the projector evaluates them);
    ``/v1/models`` lists it alone, with image input; ``/props`` is its own (no ``?model=``);
    ``/slots`` is llama-server's 501; ``/metrics`` its ``llamacpp:*`` series."""
    path = models_dir / "tiny-a.gguf"
    projector = write_tiny_mmproj(tmp_path / "projector" / "mmproj-tiny.gguf")
    svc = serve("-m", str(path), "--mmproj", str(projector), "--metrics", "--no-slots", "--models-dir", str(models_dir))
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)

    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-3.5-turbo", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert answer.model == "tiny-a" and answer.usage is not None and answer.usage.completion_tokens > 0
    assert httpx.post(f"{svc.url}/v1/chat/completions", json=CHAT, timeout=120).status_code == 200, "no model"
    assert httpx.post(f"{svc.url}/completion", json={"prompt": "a", "n_predict": 2}, timeout=120).status_code == 200
    assert [m.id for m in client.models.list()] == ["tiny-a"], "-m lists its model, not --models-dir's"
    assert list(models(svc)) == ["tiny-a"]
    assert models(svc)["tiny-a"]["architecture"]["input_modalities"] == ["text", "image"]
    listing = httpx.get(f"{svc.url}/v1/models", timeout=30).json()  # llama-server's single-model members
    meta = listing["data"][0]["meta"]
    assert set(meta) == {"vocab_type", "n_vocab", "n_ctx", "n_ctx_train", "n_embd", "n_params", "size", "ftype"}
    assert meta["ftype"] == "F16" and meta["n_vocab"] > 0 and meta["size"] > 0 and meta["n_embd"] > 0
    assert [(m["name"], m["capabilities"]) for m in listing["models"]] == [("tiny-a", ["completion", "multimodal"])]
    image = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png_bytes(16, 16, (200, 30, 30))).decode()},
    }
    seen = client.chat.completions.create(
        model="any", max_tokens=2, messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]
    )  # type: ignore[list-item]
    assert seen.usage is not None and seen.usage.prompt_tokens == answer.usage.prompt_tokens + image_tokens()

    props = httpx.get(f"{svc.url}/props", timeout=30).json()
    assert props["model_path"] == str(path) and props["is_sleeping"] is False
    assert props["modalities"]["vision"] is True
    assert props["default_generation_settings"]["n_ctx"] > 0 and props["endpoint_slots"] is False
    slots = httpx.get(f"{svc.url}/slots", timeout=30)
    assert slots.status_code == 501 and slots.json()["error"] == {
        "code": 501,
        "message": NO_SLOTS,
        "type": "not_supported_error",
    }
    metrics = httpx.get(f"{svc.url}/metrics", timeout=30)
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert "llamacpp:prompt_tokens_total" in metrics.text and "llamacpp:requests_processing" in metrics.text
    assert "modelrouter_" in metrics.text, "the router's own series beside the model's"
    assert httpx.get(f"{svc.url}/health", timeout=10).status_code == 200

    schema = httpx.get(f"{svc.url}/schema/openapi.json", timeout=30).json()["components"]["schemas"]
    assert "model" not in schema["ChatRequest"].get("required", []), "single-model mode: model is optional"


@pytest.mark.timeout(240)
def test_an_audio_projector_serves_audio_and_transcriptions(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    """``llama-server -m tiny-a.gguf --mmproj AUDIO``: listed with audio input, ``/props`` says
    ``modalities.audio``; an ``input_audio`` part and ``/completion``'s ``multimodal_data`` are
    evaluated, and a transcription naming no model (or any) reaches it, as llama-server serves them;
    a video part is its 400."""
    projector = write_tiny_audio_mmproj(tmp_path / "projector" / "mmproj-voice.gguf")
    svc = serve("-m", str(models_dir / "tiny-a.gguf"), "--mmproj", str(projector))
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)
    assert models(svc)["tiny-a"]["architecture"]["input_modalities"] == ["text", "audio"]
    assert httpx.get(f"{svc.url}/props", timeout=30).json()["modalities"] == {
        "vision": False,
        "video": False,
        "audio": True,
    }
    wav = wav_bytes(0.5)
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}}
    heard = httpx.post(
        f"{svc.url}/v1/chat/completions",
        timeout=120,
        json={"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]},
    )
    assert heard.status_code == 200 and heard.json()["usage"]["prompt_tokens"] > audio_tokens(0.5), heard.text
    marker = httpx.get(f"{svc.url}/props", timeout=30).json()["media_marker"]
    prompt = {"prompt_string": f"hear: {marker}<|im_end|>", "multimodal_data": [base64.b64encode(wav).decode()]}
    native = httpx.post(f"{svc.url}/completion", json={"prompt": prompt, "n_predict": 2}, timeout=120)
    assert native.status_code == 200 and native.json()["tokens_evaluated"] > audio_tokens(0.5), native.text
    video = {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}
    refused = httpx.post(
        f"{svc.url}/v1/chat/completions",
        timeout=120,
        json={"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, video]}]},
    )
    assert refused.status_code == 400 and refused.json()["error"]["message"].startswith("video input is not supported")
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused", max_retries=0)
    said = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", wav, "audio/wav"))
    assert isinstance(said.text, str)
    nameless = httpx.post(
        f"{svc.url}/audio/transcriptions",
        files={"file": ("a.wav", wav, "audio/wav")},
        data={"max_tokens": "2"},
        timeout=120,
    )
    assert nameless.status_code == 200 and nameless.json()["type"] == "transcript.text.done", nameless.text


@pytest.mark.timeout(240)
def test_hf_repo_is_the_one_model_for_an_openai_client(serve: Serve, hub: HubServer, tiny: bytes) -> None:
    """``llama-server -hf user/repo`` (a repo without preset.ini): its model, under any name."""
    repo = gguf_repo(hub, tiny, "single")
    svc = serve("-hf", repo)
    name = f"{repo}:Q8_0"
    wait_for_event(svc, "instance_ready", model=name, timeout=120)
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused", max_retries=0)
    answer = client.completions.create(model="text-davinci-003", prompt="hello", max_tokens=2)
    assert answer.model == name and answer.choices
    assert [m.id for m in client.models.list()] == [name]
    props = httpx.get(f"{svc.url}/props", timeout=30).json()
    assert props["model_path"].endswith("single-Q8_0.gguf") and props["is_sleeping"] is False
    metrics = httpx.get(f"{svc.url}/metrics", timeout=30)
    assert metrics.status_code == 501, "llama-server without --metrics"
    assert metrics.json()["error"] == {"code": 501, "message": NO_METRICS, "type": "not_supported_error"}


@pytest.mark.timeout(240)
def test_router_mode_still_needs_the_model(serve: Serve, models_dir: Path) -> None:
    """A router (``--models-dir``) refuses a request naming no model, keeps ``model`` required in its
    schema, and has ``/metrics`` off without ``--metrics`` (llama.cpp's router forwards it to a
    child started without it: the same 501)."""
    svc = serve("--models-dir", str(models_dir))
    missing = httpx.post(f"{svc.url}/v1/chat/completions", json=CHAT, timeout=30)
    assert missing.status_code == 400 and "model" in missing.json()["error"]["message"]
    schema = httpx.get(f"{svc.url}/schema/openapi.json", timeout=30).json()["components"]["schemas"]
    assert "model" in schema["ChatRequest"]["required"]
    metrics = httpx.get(f"{svc.url}/metrics", timeout=30)
    assert metrics.status_code == 501 and metrics.json()["error"]["message"] == NO_METRICS
    assert set(models(svc)) == {"tiny-a", "tiny-b"}
    props = httpx.get(f"{svc.url}/props", params={"model": "tiny-b"}, timeout=120).json()
    assert props["model_path"] == str(models_dir / "tiny-b.gguf") and props["is_sleeping"] is False
    assert props["default_generation_settings"]["n_ctx"] > 0


@pytest.mark.timeout(240)
def test_an_idle_model_sleeps_and_the_next_request_wakes_it(serve: Serve, models_dir: Path) -> None:
    """``--sleep-idle-seconds 1``: idle, the model's worker stops, ``GET /models`` says ``sleeping`` (as
    llama.cpp's router does) and ``/props`` ``is_sleeping: true`` without waking it; the next request
    wakes it transparently. Through the router, ``?model=`` the same."""
    path = models_dir / "tiny-a.gguf"
    svc = serve("-m", str(path), "--sleep-idle-seconds", "1", "--metrics")
    wait_until(lambda: _status(svc.url, "tiny-a") == "sleeping", "the model asleep", timeout=90)
    (stopped,) = events(svc, type="instance_stopped", model="tiny-a")
    assert stopped["data"]["reason"] == "sleep"
    props = httpx.get(f"{svc.url}/props", timeout=30).json()
    assert props["is_sleeping"] is True and props["model_path"] == str(path)
    assert httpx.get(f"{svc.url}/metrics", timeout=30).status_code == 200
    assert _status(svc.url, "tiny-a") == "sleeping", "neither /props nor /metrics wakes it"
    assert httpx.post(f"{svc.url}/v1/chat/completions", json=CHAT, timeout=120).status_code == 200
    woke = events(svc, type="instance_requested", model="tiny-a")
    assert [e["data"]["reason"] for e in woke] == ["startup", "wake"]
    wait_until(lambda: len(events(svc, type="instance_stopped", model="tiny-a")) == 2, "asleep again", timeout=90)


@pytest.mark.timeout(300)
def test_health_says_loading_model_until_the_single_model_is_ready(hub: HubServer, tiny: bytes, tmp_path: Path) -> None:
    """``llama-server -hf user/repo`` answers ``/health`` 503 ``{"error": {"code": 503, "message":
    "Loading model", "type": "unavailable_error"}}`` until its model is loaded (server-context.cpp),
    then 200. The download is held up at the Hub to see it."""
    repo = gguf_repo(hub, tiny, "slow")
    # Held until the test saw the 503 (hub.reset() releases it): a slow start-up cannot miss the window.
    hub.set_faults({"kind": "stall", "repo": repo, "path": "slow-Q8_0.gguf", "at_fraction": 0.5, "seconds": 300})
    svc = ServiceProcess(tmp_path / "home", args=["-hf", repo], env={"HF_ENDPOINT": hub.url})
    starting = threading.Thread(target=svc.start, kwargs={"timeout": 220}, daemon=True)
    starting.start()
    try:
        seen: list[httpx.Response] = []

        def loading() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                seen.append(httpx.get(f"{svc.url}/health", timeout=5))
            return bool(seen) and seen[-1].status_code == 503

        wait_until(loading, "/health answering 503 while the model downloads", timeout=60)
        assert seen[-1].json()["error"] == {"code": 503, "message": "Loading model", "type": "unavailable_error"}
        hub.reset()  # the download goes on
        starting.join(200)  # start() returns once /health answers 200: the model is loaded
        assert not starting.is_alive(), "the model was not loaded 200 s after its download went on"
        assert httpx.get(f"{svc.url}/health", timeout=10).status_code == 200
        assert _status(svc.url, f"{repo}:Q8_0") == "loaded"
    finally:
        starting.join(1)
        svc.stop()
