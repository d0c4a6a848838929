"""The official ``ollama`` client against a running service: every answer is checked for its
values, not only for arriving. One service for the module (tests.ollama.conftest)."""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import CHATML_TEMPLATE
from devtools.tiny_mmproj import image_tokens, png_bytes
from tests.eventually import eventually
from tests.ollama.conftest import client, hub_repo, hub_server, ollama_models, publish_tiny, svc
from tests.service_probes import events

__all__ = ["client", "hub_repo", "hub_server", "ollama_models", "svc"]

GREEDY = {"temperature": 0.0, "seed": 1, "num_predict": 6}
HI = [{"role": "user", "content": "hi"}]


def _running(client: ollama.Client) -> dict[str, ollama.ProcessResponse.Model]:
    return {m.model or "": m for m in client.ps().models}


def test_root_answers_ollama_probes_and_browsers_keep_the_dashboard(svc: ServiceProcess) -> None:
    plain = httpx.get(svc.url + "/", timeout=10)
    assert plain.status_code == 200 and plain.text == "Ollama is running"
    assert plain.headers["content-type"].startswith("text/plain")
    assert httpx.head(svc.url + "/", timeout=10).status_code == 200
    browser = httpx.get(svc.url + "/", headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}, timeout=10)
    assert browser.headers["content-type"].startswith("text/html") and "/dashboard/dashboard.js" in browser.text
    assert httpx.get(svc.url + "/api/version", timeout=10).json()["version"].count(".") == 2


def test_list_shows_the_models_on_disk_with_their_header_details(client: ollama.Client, ollama_models: Path) -> None:
    listed = {m.model: m for m in client.list().models}
    assert {"chat", "spare"} <= set(listed)
    chat = listed["chat"]
    assert chat.size == (ollama_models / "chat.gguf").stat().st_size
    assert chat.digest is not None and len(chat.digest) == 64 and chat.digest != listed["spare"].digest
    assert chat.details is not None
    assert (chat.details.format, chat.details.family, chat.details.families) == ("gguf", "llama", ["llama"])
    assert chat.details.quantization_level == "F16"  # the tiny writer's general.file_type 1
    assert chat.details.parameter_size is not None and chat.details.parameter_size.endswith("K")


def test_show_gives_the_template_the_header_and_the_capabilities(client: ollama.Client) -> None:
    shown = client.show("chat")
    assert shown.template == CHATML_TEMPLATE
    assert shown.modelinfo is not None
    assert shown.modelinfo["general.architecture"] == "llama" and shown.modelinfo["llama.context_length"] == 256
    assert shown.capabilities is not None and {"completion", "embedding"} <= set(shown.capabilities)
    assert "vision" not in shown.capabilities and "tools" not in shown.capabilities  # no projector, ChatML only
    assert shown.details is not None and shown.details.family == "llama"


def test_chat_streamed_and_not_say_the_same_with_counters(client: ollama.Client) -> None:
    whole = client.chat(model="chat", messages=HI, options=GREEDY, stream=False)
    assert whole.done and whole.message.role == "assistant"
    assert whole.done_reason in {"stop", "length"}
    assert whole.eval_count is not None and 1 <= whole.eval_count <= 6
    assert whole.prompt_eval_count is not None and whole.prompt_eval_count > 0
    assert whole.total_duration is not None and whole.eval_duration is not None
    assert whole.total_duration >= whole.eval_duration > 0
    parts = list(client.chat(model="chat", messages=HI, options=GREEDY, stream=True))
    assert [p.done for p in parts][-1] is True and not any(p.done for p in parts[:-1])
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count and parts[-1].done_reason == whole.done_reason


def test_options_reach_the_sampler(client: ollama.Client) -> None:
    short = client.chat(model="chat", messages=HI, options={**GREEDY, "num_predict": 2}, stream=False)
    assert short.eval_count == 2 and short.done_reason == "length"
    bounded = client.chat(model="chat", messages=HI, options={**GREEDY, "num_predict": 50, "num_ctx": 3}, stream=False)
    assert bounded.eval_count == 3 and bounded.done_reason == "length"  # the answer stays within num_ctx
    roomy = client.chat(model="chat", messages=HI, options={**GREEDY, "num_ctx": 100_000}, stream=False)
    assert roomy.eval_count == whole_eval_count(client)  # more than loaded: the loaded context, no refusal
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model="chat", messages=HI, options={"temperature": "hot"})
    assert refused.value.status_code == 400 and refused.value.error == "options.temperature must be a number"


def whole_eval_count(client: ollama.Client) -> int | None:
    return client.chat(model="chat", messages=HI, options=GREEDY, stream=False).eval_count


def test_generate_through_the_template_and_raw(client: ollama.Client) -> None:
    templated = client.generate(model="chat", prompt="hello", options=GREEDY)
    assert templated.done and templated.eval_count is not None and templated.eval_count >= 1
    assert templated.prompt_eval_count is not None and templated.prompt_eval_count > len("hello")  # ChatML around it
    raw = client.generate(model="chat", prompt="hello", raw=True, options=GREEDY)
    assert raw.prompt_eval_count is not None and raw.prompt_eval_count < templated.prompt_eval_count
    streamed = list(client.generate(model="chat", prompt="hello", options=GREEDY, stream=True))
    assert "".join(p.response for p in streamed) == templated.response


def test_a_suffix_fills_in_the_middle_with_the_models_fim_tokens(client: ollama.Client) -> None:
    filled = client.generate(model="fim", prompt="def f(", suffix="    return x\n", options=GREEDY)
    assert filled.done and filled.eval_count is not None and 1 <= filled.eval_count <= 6
    assert not filled.response.endswith("return x\n")  # the suffix is context, not part of the answer
    parts = list(client.generate(model="fim", prompt="def f(", suffix="    return x\n", options=GREEDY, stream=True))
    assert "".join(p.response for p in parts) == filled.response and parts[-1].eval_count == filled.eval_count
    with pytest.raises(ollama.ResponseError) as refused:
        client.generate(model="chat", prompt="def f(", suffix="    return x\n")  # no FIM tokens
    assert refused.value.status_code == 400


def test_format_json_constrains_the_answer(client: ollama.Client) -> None:
    answer = client.generate(model="chat", prompt="json", format="json", options={**GREEDY, "num_predict": 12})
    assert answer.response.lstrip().startswith("{"), answer.response
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    shaped = client.chat(model="chat", messages=HI, format=schema, options={**GREEDY, "num_predict": 12})
    assert shaped.message.content is not None and shaped.message.content.replace(" ", "").startswith('{"a":')


def test_embed_on_a_chat_model(client: ollama.Client) -> None:
    answer = client.embed(model="chat", input=["a cat", "a dog"])
    assert len(answer.embeddings) == 2 and all(len(v) == 64 for v in answer.embeddings)
    assert answer.embeddings[0] != answer.embeddings[1]
    assert all(math.isclose(math.hypot(*v), 1.0, rel_tol=1e-3) for v in answer.embeddings)
    assert answer.prompt_eval_count is not None and answer.prompt_eval_count > 0
    short = client.embed(model="chat", input="a cat", dimensions=8)
    assert len(short.embeddings[0]) == 8 and math.isclose(math.hypot(*short.embeddings[0]), 1.0, rel_tol=1e-3)
    old = client.embeddings(model="chat", prompt="a cat")
    assert len(old.embedding) == 64
    assert old.embedding == pytest.approx(answer.embeddings[0], abs=1e-4)


def test_ps_and_keep_alive(client: ollama.Client, svc: ServiceProcess) -> None:
    loaded = client.chat(model="spare", messages=[], keep_alive=-1)
    assert loaded.done and loaded.done_reason == "load"
    spare = _running(client)["spare"]
    assert spare.context_length == 256 and spare.size_vram == 0 and spare.size is not None and spare.size > 0
    assert spare.expires_at is not None and spare.expires_at.year > 2200  # -1: never
    client.generate(model="spare", prompt="x", keep_alive="1h", options={"num_predict": 1})
    expires = _running(client)["spare"].expires_at
    assert expires is not None and 3500 < (expires - datetime.now(UTC)).total_seconds() <= 3600
    client.chat(model="spare", messages=HI, keep_alive=0, options={"num_predict": 1})
    eventually(lambda: "spare" not in _running(client), "spare unloaded after keep_alive 0", timeout=30)
    stops = events(svc, type="instance_stop_requested", model="spare")
    assert stops and stops[-1]["data"]["reason"] == "keep_alive"


def test_an_empty_request_loads_and_keep_alive_0_unloads(client: ollama.Client) -> None:
    assert client.generate(model="spare", prompt="").done_reason == "load"
    assert "spare" in _running(client)
    assert client.chat(model="spare", messages=[], keep_alive=0).done_reason == "unload"
    assert "spare" not in _running(client)  # the answer came once the worker was gone


def test_errors_are_ollamas_shape_with_the_right_status(client: ollama.Client, svc: ServiceProcess) -> None:
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="nope", messages=HI)
    assert missing.value.status_code == 404 and missing.value.error == 'model "nope" not found, try pulling it first'
    for call in (lambda: client.show("nope"), lambda: client.delete("nope")):
        with pytest.raises(ollama.ResponseError) as gone:
            call()
        assert gone.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as bad:
        client.chat(model="chat", messages=HI, keep_alive="soon")
    assert bad.value.status_code == 400 and "keep_alive" in bad.value.error
    with pytest.raises(ollama.ResponseError) as unknown:
        client.pull("hf.co/nobody/nothing-GGUF:Q4_K_M")
    assert unknown.value.status_code == 404
    answer = httpx.post(f"{svc.url}/api/chat", json={"model": 3}, timeout=10)
    assert answer.status_code == 400 and set(answer.json()) == {"error"} and "model" in answer.json()["error"]
    for path in ("/api/create", "/api/push"):
        refused = httpx.post(f"{svc.url}{path}", json={"model": "x"}, timeout=10)
        assert refused.status_code == 400 and "pulls GGUFs from the Hugging Face Hub" in refused.json()["error"]


def test_pull_streams_progress_then_the_model_chats_and_deletes(client: ollama.Client, hub_repo: str) -> None:
    name = f"{hub_repo}:Q8_0"
    steps = list(client.pull(f"hf.co/{name}", stream=True))
    statuses = [s.status for s in steps]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    layers = [s for s in steps if s.digest]
    size, digest = _published(client, name)
    assert layers and layers[-1].total == size and layers[-1].completed == size
    assert layers[-1].digest == f"sha256:{digest}" and layers[-1].status == f"pulling {digest[:12]}"
    reply = client.chat(model=f"hf.co/{name}", messages=HI, options={"num_predict": 2}, stream=False)
    assert reply.eval_count is not None and reply.eval_count >= 1
    assert client.copy(name, "pulled-copy").status == "success"
    assert client.delete(name).status == "success"  # the model: its copies' names go with it
    assert not {name, "pulled-copy"} & {m.model for m in client.list().models}
    for gone_name in (name, "pulled-copy"):
        with pytest.raises(ollama.ResponseError) as gone:
            client.delete(gone_name)
        assert gone.value.status_code == 404


def _published(client: ollama.Client, name: str) -> tuple[int, str]:
    listed = {m.model: m for m in client.list().models}[name]
    assert listed.size is not None and listed.digest is not None
    return listed.size, listed.digest


def test_pull_without_streaming_answers_success_once(client: ollama.Client, hub_repo: str, tmp_path: Path) -> None:
    answer = client.pull(f"huggingface.co/{hub_repo}:Q8_0", stream=False)
    assert answer.status == "success"
    size, digest = _published(client, f"{hub_repo}:Q8_0")
    assert digest == hashlib.sha256((tmp_path / "tiny-Q8_0.gguf").read_bytes()).hexdigest()
    assert size == (tmp_path / "tiny-Q8_0.gguf").stat().st_size
    again = list(client.pull(f"{hub_repo}:Q8_0", stream=True))  # already there: no new job, the same lines
    assert [s.status for s in again][-1] == "success"


def _story(svc: ServiceProcess, model: str) -> list[tuple[str, list[str]]]:
    """A model's events: their types and payload members, progress left out (its count varies)."""
    found = [e for e in events(svc, model=model) if e["type"] != "download_progress"]
    return [(e["type"], sorted(e["data"])) for e in found]


def _jobs(svc: ServiceProcess, model: str) -> list[dict[str, Any]]:
    listed = httpx.get(f"{svc.url}/downloads", timeout=10).json()["downloads"]
    return [job for job in listed if job["model"] == model]


@pytest.mark.timeout(120)
def test_modelrouter_pull_and_ollama_pull_share_the_job_and_the_events(
    client: ollama.Client, svc: ServiceProcess, hub_server: HubServer, tmp_path: Path
) -> None:
    shared = f"{publish_tiny(hub_server, _mkdir(tmp_path / 'shared'))}:Q8_0"
    alone = f"{publish_tiny(hub_server, _mkdir(tmp_path / 'alone'))}:Q8_0"
    hub_server.set_faults({"kind": "throttle", "repo": shared.split(":")[0], "rate": 60_000})  # ~4 s
    try:
        cli = subprocess.Popen(  # our own CLI
            [sys.executable, "-m", "service.cli", "pull", shared],
            env={**os.environ, "MODELROUTER_URL": svc.url, "COLUMNS": "200"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        running = eventually(lambda: [j for j in _jobs(svc, shared) if j["status"] == "running"], "the CLI's job")
        steps = list(client.pull(f"hf.co/{shared}", stream=True))  # joins the running job
        assert cli.wait(timeout=60) == 0, cli.stdout.read() if cli.stdout else ""
    finally:
        hub_server.reset()
    assert [j["job_id"] for j in _jobs(svc, shared)] == [running[0]["job_id"]]  # one job for both
    assert steps[-1].status == "success" and any(s.completed and s.completed < (s.total or 0) for s in steps)
    assert client.pull(f"hf.co/{alone}", stream=False).status == "success"
    assert _story(svc, alone) == _story(svc, shared)  # the same events whichever front asked
    assert [t for t, _ in _story(svc, shared)][:3] == ["download_requested", "download_started", "download_finished"]


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.timeout(120)
def test_hanging_up_a_pull_leaves_its_job_running(svc: ServiceProcess, hub_server: HubServer, tmp_path: Path) -> None:
    name = f"{publish_tiny(hub_server, tmp_path)}:Q8_0"
    hub_server.set_faults({"kind": "throttle", "repo": name.split(":")[0], "rate": 60_000})
    try:
        with httpx.stream("POST", f"{svc.url}/api/pull", json={"model": name}, timeout=30) as answer:
            lines = answer.iter_lines()
            assert '"pulling manifest"' in next(lines)
            assert '"digest"' in next(lines)
        # The client is gone; the job is not.
        job = eventually(
            lambda: [j for j in _jobs(svc, name) if j["status"] == "finished"], "the job finished", timeout=60
        )
    finally:
        hub_server.reset()
    assert len(job) == 1 and job[0]["bytes_done"] == (tmp_path / "tiny-Q8_0.gguf").stat().st_size
    assert not [e for e in events(svc, model=name) if e["type"].startswith("download_cancel")]


def test_images_reach_a_model_with_a_projector(client: ollama.Client) -> None:
    """``/api/chat`` with ``images`` (the official client base64-encodes the bytes): the model's projector
    evaluates them, so the answer depends on the picture, and each image adds its tokens to what is
    evaluated (``prompt_eval_count``; the text before the images comes from the cache in both)."""
    assert "vision" in (client.show("vision").capabilities or [])

    def ask(*images: bytes) -> ollama.ChatResponse:
        turn = {"role": "user", "content": "what is it?", "images": list(images)}
        return client.chat(model="vision", messages=[turn], options={**GREEDY, "num_predict": 4})

    ask()  # the text before the images, cached
    red, blue = ask(png_bytes(20, 20, (255, 0, 0))), ask(png_bytes(20, 20, (0, 0, 255)))
    assert red.message.content != blue.message.content, "another picture, another greedy answer"
    two = ask(png_bytes(20, 20, (0, 255, 0)), png_bytes(20, 20, (255, 255, 0)))
    assert two.prompt_eval_count == (red.prompt_eval_count or 0) + image_tokens()


def test_images_without_a_projector_are_refused_by_the_worker(client: ollama.Client) -> None:
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model="chat", messages=[{"role": "user", "content": "what is it?", "images": [png]}])
    assert refused.value.status_code == 400 and refused.value.error


def _aliases_in_models(svc: ServiceProcess, model: str) -> list[str]:
    listed = httpx.get(f"{svc.url}/v1/models", timeout=10).json()["data"]
    return next(m["aliases"] for m in listed if m["id"] == model)


def test_copy_gives_a_model_a_second_name_until_that_name_is_deleted(
    client: ollama.Client, svc: ServiceProcess
) -> None:
    assert client.copy("chat", "my-chat:latest").status == "success"  # Ollama's default tag: the same name
    again = httpx.post(f"{svc.url}/api/copy", json={"source": "chat", "destination": "my-chat"}, timeout=10)
    assert (again.status_code, again.content) == (200, b"")  # Ollama's status-only answer; and no second event
    assert [e["data"] for e in events(svc, type="model_aliased", model="chat")] == [{"alias": "my-chat"}]
    listed = {m.model: m for m in client.list().models}
    assert (listed["my-chat"].digest, listed["my-chat"].size) == (listed["chat"].digest, listed["chat"].size)
    assert _aliases_in_models(svc, "chat") == ["my-chat"]  # as a preset's alias shows
    assert client.show("my-chat").template == CHATML_TEMPLATE
    by_alias = client.chat(model="my-chat:latest", messages=HI, options=GREEDY, stream=False)
    assert by_alias.message.content == client.chat(model="chat", messages=HI, options=GREEDY).message.content
    assert client.generate(model="my-chat", prompt="hello", options=GREEDY).done
    assert httpx.post(f"{svc.url}/models/reload", timeout=30).status_code == 200
    assert _aliases_in_models(svc, "chat") == ["my-chat"]  # a reload re-reads the sources, not the log's names
    svc.stop()
    svc.start()  # the same home: its log is replayed, and the name with it
    assert client.show("my-chat").template == CHATML_TEMPLATE and _aliases_in_models(svc, "chat") == ["my-chat"]
    assert client.delete("my-chat").status == "success"  # that name only
    assert [e["data"] for e in events(svc, type="model_alias_removed", model="chat")] == [{"alias": "my-chat"}]
    names = {m.model for m in client.list().models}
    assert "chat" in names and "my-chat" not in names and _aliases_in_models(svc, "chat") == []
    with pytest.raises(ollama.ResponseError) as gone:
        client.chat(model="my-chat", messages=HI)
    assert gone.value.status_code == 404


def test_copy_refuses_a_taken_name_and_an_unknown_source(client: ollama.Client) -> None:
    client.copy("spare", "spare-copy")
    for source, taken in (("chat", "spare"), ("chat", "spare-copy"), ("spare", "chat")):
        with pytest.raises(ollama.ResponseError) as refused:
            client.copy(source, taken)
        assert refused.value.status_code == 409 and "already names model" in refused.value.error
    with pytest.raises(ollama.ResponseError) as missing:
        client.copy("nope", "anything")
    assert missing.value.status_code == 404 and missing.value.error == 'model "nope" not found, try pulling it first'
    assert client.delete("spare-copy").status == "success"


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "weather in Paris?"}]
CALL = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def _calls(message: ollama.Message) -> list[dict[str, Any]]:
    return [
        {"function": {"name": c.function.name, "arguments": dict(c.function.arguments)}}
        for c in message.tool_calls or []
    ]


def test_tool_calls_through_chat_streamed_and_not(client: ollama.Client) -> None:
    """The ``tools`` model answers every chat with ``WEATHER_CALL`` (devtools.tiny_gguf's forced reply),
    in its Hermes template's syntax, which the worker parses into OpenAI's tool call."""
    whole = client.chat(model="tools", messages=ASK, tools=[WEATHER], stream=False)
    assert _calls(whole.message) == [CALL] and whole.message.content == "" and whole.done_reason == "stop"
    parts = list(client.chat(model="tools", messages=ASK, tools=[WEATHER], stream=True))
    assert [c for p in parts for c in _calls(p.message)] == [CALL]
    assert parts[-1].done and not any(p.done for p in parts[:-1]) and parts[-1].eval_count == whole.eval_count
    answer = {"role": "tool", "content": "sunny, 21 degrees", "tool_name": "get_weather"}
    follow = client.chat(model="tools", messages=[*ASK, whole.message, answer], tools=[WEATHER], stream=False)
    assert follow.done and _calls(follow.message) == [CALL]  # accepted, rendered, answered (the model knows one reply)


def test_show_says_tools_only_for_a_template_that_knows_them(client: ollama.Client) -> None:
    tools = client.show("tools").capabilities or []
    assert "tools" in tools and "completion" in tools
    assert "tools" not in (client.show("chat").capabilities or [])
