"""``POST /completions`` is llama-server's native completion; only ``/v1/completions`` is OpenAI's.

llama-server registers ``/completion`` and ``/completions`` to ``post_completions``
and ``/v1/completions`` to ``post_completions_oai`` (``tools/server/server.cpp``),
so a bare ``/completions`` answers ``content`` (the upstream ``test_security.py``
API-key tests read it), not OpenAI's ``choices[].text``. Single-model mode with
an API key, as those tests start it, and through the router.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from tests.dropin.conftest import Serve

KEY = "sk-completions-0123"
BODY = {"prompt": "I believe the meaning of life is", "max_tokens": 3}


def _post(url: str, path: str, **extra: Any) -> dict[str, Any]:
    answer = httpx.post(f"{url}{path}", json={**BODY, **extra}, headers={"X-Api-Key": KEY}, timeout=120)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _stream(url: str, path: str, **extra: Any) -> list[str]:
    payload = {**BODY, **extra, "stream": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", f"{url}{path}", json=payload, headers=headers, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return [line[6:] for line in r.iter_lines() if line.startswith("data: ")]


def _assert_native_and_openai(url: str, **extra: Any) -> None:
    for path in ("/completions", "/completion"):
        native = _post(url, path, **extra)
        assert isinstance(native["content"], str) and native["stop"] is True, (path, native)
        assert "choices" not in native and native["tokens_predicted"] >= 1, path
    openai = _post(url, "/v1/completions", **extra)
    assert openai["object"] == "text_completion" and isinstance(openai["choices"][0]["text"], str)
    assert "content" not in openai


@pytest.mark.timeout(180)
def test_single_model_completions_is_the_native_completion(serve: Serve, models_dir: Path) -> None:
    svc = serve("-m", str(models_dir / "tiny-a.gguf"), "--api-key", KEY)
    # serve() returned on /health's 200: single-model mode's model is loaded (until then "Loading model")
    _assert_native_and_openai(svc.url)
    native = _stream(svc.url, "/completions")
    assert native[-1] != "[DONE]" and json.loads(native[-1])["stop"] is True, "llama-server's native stream"
    assert "content" in json.loads(native[0])
    openai = _stream(svc.url, "/v1/completions")
    assert openai[-1] == "[DONE]" and json.loads(openai[0])["object"] == "text_completion"


@pytest.mark.timeout(180)
def test_the_router_routes_completions_to_the_native_completion(tmp_path: Path, models_dir: Path) -> None:
    preset = tmp_path / "models.ini"
    preset.write_text(f"[tiny]\nmodel = {models_dir / 'tiny-a.gguf'}\n")
    with ServiceProcess(tmp_path / "home", args=["--models-preset", str(preset), "--api-key", KEY]) as svc:
        _assert_native_and_openai(svc.url, model="tiny")
