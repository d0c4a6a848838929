"""``llama-server -m FILE --alias b,a --tags x,y``: in single-model mode the first alias (in sorted
order, as llama-server keeps them in a ``std::set``) is the model's id, in ``GET /v1/models``, in
the ``model`` of every answer and in ``/props``'s ``model_alias`` (``server-context.cpp``:
"backward compat: use first alias as model name"); llama.cpp's ``test_basic.py``
(``test_server_model_aliases_and_tags``, ``test_server_models``), ``test_chat_completion.py``
(``test_chat_completion_stream``) and ``test_sleep.py`` (``test_server_sleep``) assert it.

Router mode keeps each model's name as its id (llama.cpp's router starts each child with ``--alias
NAME``): ``test_serve_layouts`` asserts a preset's aliases route to the model that answers under
its name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.dropin.conftest import CHAT, Serve, wait_until
from tests.service_probes import wait_for_event

ID = "code"  # the first of {"tinyllama-2", "fim", "code"} in sorted order: llama.cpp's test asserts it
ASK: list[Any] = [{"role": "user", "content": "hi"}]


def _listing(url: str, path: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}{path}", timeout=30)
    answer.raise_for_status()
    listing: dict[str, Any] = answer.json()
    return listing


def _streamed_models(url: str, path: str, body: dict[str, Any]) -> set[str]:
    """The ``model`` of every event of a streamed answer."""
    seen: set[str] = set()
    with httpx.stream("POST", f"{url}{path}", json={**body, "stream": True}, timeout=120) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                seen.add(json.loads(line[len("data: ") :])["model"])
    return seen


@pytest.mark.timeout(240)
def test_the_first_alias_is_the_id_of_the_one_model(serve: Serve, models_dir: Path) -> None:
    """``-m tiny-a.gguf --alias tinyllama-2,fim,code --tags chat,fim,small``: ``/v1/models`` and
    ``/models`` list ``code`` with every alias and tag (sorted, as llama-server's sets); each answer's
    ``model`` is ``code`` whatever the request named (its file's name, an alias, an OpenAI name or
    none), streamed too; ``/props`` says ``model_alias: code``."""
    svc = serve("-m", str(models_dir / "tiny-a.gguf"), "--alias", "tinyllama-2, fim,code", "--tags", "chat,fim,small")
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)
    for path in ("/v1/models", "/models"):
        listing = _listing(svc.url, path)
        assert [m["id"] for m in listing["data"]] == [ID], path
        entry = listing["data"][0]
        assert entry["aliases"] == ["code", "fim", "tinyllama-2"] and entry["tags"] == ["chat", "fim", "small"]
        assert [m["name"] for m in listing["models"]] == [ID] and [m["model"] for m in listing["models"]] == [ID]

    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused", max_retries=0)
    for named in ("gpt-3.5-turbo", "tiny-a", "tinyllama-2", ID):
        answer = client.chat.completions.create(model=named, messages=ASK, max_tokens=2)
        assert answer.model == ID, named
    assert httpx.post(f"{svc.url}/v1/chat/completions", json=CHAT, timeout=120).json()["model"] == ID, "no model"
    assert client.completions.create(model="tiny-a", prompt="a", max_tokens=2).model == ID
    native = httpx.post(f"{svc.url}/completion", json={"prompt": "a", "n_predict": 2}, timeout=120)
    assert native.json()["model"] == ID
    messages = anthropic.Anthropic(base_url=svc.url, api_key="unused", max_retries=0)
    assert messages.messages.create(model="claude", max_tokens=2, messages=ASK).model == ID
    assert client.responses.create(model="gpt-4o", input="hi", max_output_tokens=2).model == ID
    chat_stream = {"messages": ASK, "max_tokens": 2, "stream_options": {"include_usage": True}}
    assert _streamed_models(svc.url, "/v1/chat/completions", chat_stream) == {ID}
    assert _streamed_models(svc.url, "/v1/completions", {"prompt": "a", "max_tokens": 2}) == {ID}

    props = httpx.get(f"{svc.url}/props", timeout=30).json()
    assert props["model_alias"] == ID


@pytest.mark.timeout(240)
def test_without_alias_the_id_is_the_models_name_and_its_one_alias(serve: Serve, models_dir: Path) -> None:
    """Without ``--alias`` the id stays the model's name, and ``aliases`` holds it alone (llama-server
    adds the model's name to its empty alias set, "for consistency" with router mode)."""
    svc = serve("-m", str(models_dir / "tiny-a.gguf"))
    listing = _listing(svc.url, "/v1/models")
    assert [(m["id"], m["aliases"]) for m in listing["data"]] == [("tiny-a", ["tiny-a"])]
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)
    assert httpx.post(f"{svc.url}/v1/chat/completions", json=CHAT, timeout=120).json()["model"] == "tiny-a"


@pytest.mark.timeout(240)
def test_a_sleeping_model_is_listed_under_its_alias(serve: Serve, models_dir: Path) -> None:
    """``--alias tinyllama-2 --sleep-idle-seconds 1`` (llama.cpp's ``test_server_sleep``): asleep,
    the model is still listed as ``tinyllama-2`` and ``/props`` says so, without waking it."""
    svc = serve("-m", str(models_dir / "tiny-a.gguf"), "--alias", "tinyllama-2", "--sleep-idle-seconds", "1")
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)
    wait_until(lambda: httpx.get(f"{svc.url}/props", timeout=30).json()["is_sleeping"] is True, "the model sleeps")
    assert [m["id"] for m in _listing(svc.url, "/models")["data"]] == ["tinyllama-2"]
    assert httpx.get(f"{svc.url}/props", timeout=30).json()["model_alias"] == "tinyllama-2"
    woken = httpx.post(f"{svc.url}/completion", json={"prompt": "a", "n_predict": 1}, timeout=120)
    assert woken.status_code == 200 and woken.json()["model"] == "tinyllama-2"
