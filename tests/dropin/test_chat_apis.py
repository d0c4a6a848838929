"""Chats as llama-server serves them (issue 20 part C), through the real client libraries.

One ``modelrouter serve --models-dir DIR --jinja --api-key KEY`` over tiny real GGUFs:
``tools`` has a Hermes-style template that writes tools and opens ``<think>`` when
asked (``devtools.tiny_gguf.TOOLS_TEMPLATE``), ``coder`` one of the Qwen3-Coder
family (XML calls), ``plain`` has no template (ChatML, as
llama-server falls back), ``vision`` has a multimodal projector beside it, ``audio``
an audio projector (``devtools.tiny_audio_mmproj``). The weights
are random, so answers are checked for shape, and tool calls are forced with
``tool_choice`` (the grammar makes them well-formed). Shapes follow llama.cpp's
``tools/server/tests/unit/test_tool_call.py``, ``test_template.py``,
``test_compat_anthropic.py`` and ``test_compat_oai_responses.py``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_audio_mmproj import audio_tokens, wav_bytes, write_tiny_audio_mmproj
from devtools.tiny_gguf import TOOLS_TEMPLATE, write_tiny_gguf
from devtools.tiny_mmproj import image_tokens, png_bytes, write_tiny_mmproj
from devtools.tiny_video import frames_at, video_bytes
from tests.dropin.conftest import WEATHER, streamed_tool_call

KEY = "sk-chat-test"
CTX = 1024  # with -np 1 one slot holds it all (llama-server shares -c out among the slots)
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# A short template of the Qwen3-Coder family (its markers are how llama.cpp and we recognise it):
# calls are XML elements, one per parameter.
CODER_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t.function.name }}\n{% endfor %}"
    "Call: <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("chat-apis")
    models = root / "models"
    # Byte-level tokens: a prompt with tools is ~500 tokens.
    write_tiny_gguf(models / "tools.gguf", chat_template=TOOLS_TEMPLATE, n_ctx=CTX)
    write_tiny_gguf(models / "plain.gguf", chat_template=None, n_ctx=CTX)
    write_tiny_gguf(models / "coder.gguf", chat_template=CODER_TEMPLATE, n_ctx=CTX)
    write_tiny_gguf(models / "vision" / "vision.gguf", n_ctx=CTX)
    write_tiny_mmproj(models / "vision" / "mmproj-F16.gguf")
    write_tiny_gguf(models / "audio" / "audio.gguf", n_ctx=CTX)
    write_tiny_audio_mmproj(models / "audio" / "mmproj-F16.gguf")
    args = ["--models-dir", str(models), "--jinja", "--api-key", KEY, "-c", str(CTX), "-np", "1"]
    # llama.cpp's variables are every model's defaults, as its router passes them to each child
    with ServiceProcess(root / "home", args=args, env={"LLAMA_ARG_VIDEO_FPS": "2"}) as proc:
        yield proc


@pytest.fixture(scope="module")
def oai(svc: ServiceProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{svc.url}/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(svc: ServiceProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=svc.url, api_key=KEY, max_retries=0, timeout=120)  # sends x-api-key


def _post(svc: ServiceProcess, path: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    answer = httpx.post(f"{svc.url}{path}", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    assert answer.status_code == status, answer.text
    result: dict[str, Any] = answer.json()
    return result


# -- templates -------------------------------------------------------------------------


def test_apply_template_is_what_a_chat_evaluates(svc: ServiceProcess) -> None:
    """/apply-template renders tools and kwargs as the chat does: its prompt, tokenized as
    llama-server tokenizes prompts, is exactly the chat's prompt_tokens and input_tokens."""
    body = {"model": "tools", "messages": ASK, "tools": [WEATHER], "chat_template_kwargs": {"thinking": True}}
    prompt = _post(svc, "/apply-template", body)["prompt"]
    assert prompt.startswith("<|im_start|>system\n# Tools\n<tools>\n")
    assert json.dumps(WEATHER, ensure_ascii=False) in prompt or '"get_weather"' in prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    tokens = _post(svc, "/tokenize", {"model": "tools", "content": prompt, "add_special": True})["tokens"]
    chat = _post(svc, "/v1/chat/completions", {**body, "max_tokens": 2})
    assert chat["usage"]["prompt_tokens"] == len(tokens)
    counted = _post(svc, "/v1/chat/completions/input_tokens", body)
    assert counted["input_tokens"] == len(tokens)


def test_a_gguf_without_template_gets_chatml(svc: ServiceProcess) -> None:
    """llama-server's fallback (common_chat_templates_init: CHATML_TEMPLATE_SRC), not llama-2's [INST]."""
    prompt = _post(svc, "/apply-template", {"model": "plain", "messages": ASK})["prompt"]
    assert prompt == "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"


def test_reasoning_content_and_reasoning_format(oai: openai.OpenAI) -> None:
    """A prompt that opened <think> starts the answer inside the reasoning; ``none`` keeps it in content."""
    kwargs: dict[str, Any] = {"model": "tools", "messages": ASK, "max_tokens": 6, "temperature": 0}
    thinking = oai.chat.completions.create(**kwargs, extra_body={"chat_template_kwargs": {"thinking": True}})
    message = thinking.choices[0].message
    reasoning = getattr(message, "reasoning_content", None) or (message.model_extra or {}).get("reasoning_content")
    assert reasoning, message
    assert not (message.content or "").startswith(reasoning)
    plain = oai.chat.completions.create(
        **kwargs, extra_body={"chat_template_kwargs": {"thinking": True}, "reasoning_format": "none"}
    )
    assert plain.choices[0].message.content
    assert not (plain.choices[0].message.model_extra or {}).get("reasoning_content")


# -- tools -----------------------------------------------------------------------------


def test_required_tool_call(oai: openai.OpenAI) -> None:
    answer = oai.chat.completions.create(
        model="tools",
        messages=ASK,
        tools=[WEATHER],
        tool_choice="required",  # type: ignore[arg-type]
        max_tokens=200,
        temperature=0,
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function" and calls[0].id
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments)["city"] in ("Paris", "Rome")


def test_streamed_tool_call_deltas_rebuild_the_call(oai: openai.OpenAI) -> None:
    """The first delta of a call carries its index, id and name; the arguments arrive in pieces
    that join to the same call as the whole (greedy) answer."""
    kwargs: dict[str, Any] = {
        "model": "tools",
        "messages": ASK,
        "tools": [WEATHER],
        "max_tokens": 200,
        "temperature": 0,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }
    whole = oai.chat.completions.create(**kwargs).choices[0].message.tool_calls or []
    ids, names, args, finish, pieces = streamed_tool_call(oai.chat.completions.create(**kwargs, stream=True))
    assert finish == "tool_calls"
    assert len(ids) == 1 and names == ["get_weather"] and pieces > 1
    assert json.loads(args) == json.loads(whole[0].function.arguments)


def test_a_qwen3_coder_family_call_is_xml_and_arrives_as_json(oai: openai.OpenAI) -> None:
    """A template of another family than Hermes: the required call is written in its XML (the
    grammar in that family's syntax), read back as OpenAI's JSON arguments, whole and streamed."""
    kwargs: dict[str, Any] = {
        "model": "coder",
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_tokens": 100,
        "temperature": 0,
    }
    choice = oai.chat.completions.create(**kwargs).choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    calls = choice.message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)["city"] in ("Paris", "Rome")) for c in calls] == [
        ("get_weather", True)
    ]
    names, args = [], ""
    for chunk in oai.chat.completions.create(**kwargs, stream=True):
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            names += [call.function.name] if call.function and call.function.name else []
            args += call.function.arguments or "" if call.function else ""
    assert names == ["get_weather"] and json.loads(args) == json.loads(calls[0].function.arguments)


def test_a_tool_conversation_renders(svc: ServiceProcess) -> None:
    """An assistant's tool call and the tool's answer go through the template (arguments as objects)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}
    messages = [
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    prompt = _post(svc, "/apply-template", {"model": "tools", "messages": messages, "tools": [WEATHER]})["prompt"]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>' in prompt
    assert "<tool_response>\nsunny\n</tool_response>" in prompt


def test_bad_tools_are_400s(svc: ServiceProcess) -> None:
    for bad in (
        {"tools": "x"},
        {"tools": [{"type": "function"}]},
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
    ):
        error = _post(svc, "/v1/chat/completions", {"model": "tools", "messages": ASK, **bad}, status=400)
        assert error["error"]["code"] == 400 and error["error"]["message"]


# -- OpenAI's Responses API ---------------------------------------------------------------


def test_responses_api(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="plain", input="hi", instructions="be brief", max_output_tokens=5)
    assert response.object == "response" and response.status == "completed"
    assert response.output[0].type == "message" and isinstance(response.output_text, str) and response.output_text
    assert response.usage is not None and response.usage.input_tokens > 0 and 0 < response.usage.output_tokens <= 5


def test_responses_stream_and_function_calls(oai: openai.OpenAI) -> None:
    tool = {"type": "function", **WEATHER["function"]}
    with oai.responses.stream(
        model="tools",
        input=ASK,
        tools=[tool],
        tool_choice="required",  # type: ignore[arg-type]
        max_output_tokens=200,
        temperature=0,
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds and "response.output_item.done" in kinds
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments)["city"] in ("Paris", "Rome")


def test_responses_input_tokens_and_refusals(svc: ServiceProcess) -> None:
    counted = _post(svc, "/v1/responses/input_tokens", {"model": "plain", "input": "hi"})
    direct = _post(
        svc, "/v1/chat/completions/input_tokens", {"model": "plain", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert counted["input_tokens"] == direct["input_tokens"] > 0
    stored = _post(svc, "/v1/responses", {"model": "plain", "input": "hi", "previous_response_id": "resp_1"}, 400)
    assert "previous_response_id" in stored["error"]["message"]


# -- Anthropic's Messages API ------------------------------------------------------------


def test_anthropic_messages_with_system_and_parts(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="plain",
        max_tokens=5,
        system="be brief",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("max_tokens", "end_turn")
    counted = claude.messages.count_tokens(
        model="plain", system="be brief", messages=[{"role": "user", "content": "hi"}]
    )
    assert counted.input_tokens == message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 0


def test_anthropic_stream_events(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="plain", max_tokens=6, messages=[{"role": "user", "content": "hi"}], extra_body={"temperature": 0}
    ) as s:  # greedy: random weights must not end it early by chance
        events = list(s)
        final = s.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds and "message_delta" in kinds
    streamed = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert streamed and final.content[0].type == "text" and final.content[0].text == streamed
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6


def test_anthropic_tool_use(claude: anthropic.Anthropic) -> None:
    tool = {"name": "get_weather", "description": "the weather", "input_schema": WEATHER["function"]["parameters"]}
    message = claude.messages.create(
        model="tools",
        max_tokens=200,
        tools=[tool],
        tool_choice={"type": "any"},  # type: ignore[list-item]
        messages=ASK,
        extra_body={"temperature": 0},
    )  # type: ignore[arg-type]
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and len(uses) == 1
    assert uses[0].name == "get_weather" and uses[0].input["city"] in ("Paris", "Rome")  # type: ignore[index]
    # The answer goes back as a tool_result block and renders as the template's tool response.
    follow = claude.messages.count_tokens(
        model="tools",
        tools=[tool],
        messages=[  # type: ignore[list-item]
            *ASK,
            {"role": "assistant", "content": [u.model_dump() for u in uses]},  # type: ignore[list-item]
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]},
        ],
    )
    assert follow.input_tokens > 0


def test_anthropic_needs_the_key(svc: ServiceProcess) -> None:
    wrong = anthropic.Anthropic(base_url=svc.url, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(model="plain", max_tokens=2, messages=[{"role": "user", "content": "hi"}])


# -- multimodal ------------------------------------------------------------------------


def test_models_list_image_input_for_a_projector(svc: ServiceProcess) -> None:
    answer = httpx.get(f"{svc.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
    modalities = {m["id"]: m["architecture"]["input_modalities"] for m in answer["data"]}
    assert modalities["vision"] == ["text", "image"]
    assert modalities["audio"] == ["text", "audio"], "from the projector's header, as llama.cpp's router"
    assert modalities["plain"] == modalities["tools"] == ["text"]


def test_images_need_a_projector_and_are_evaluated_with_one(svc: ServiceProcess, oai: openai.OpenAI) -> None:
    """Without one, llama-server's 400; with one (routed to the model's worker with ``--mmproj``) the
    image is evaluated: an OpenAI client's prompt counts its tokens, and a corrupt one is the 400
    llama-server gives."""
    png = base64.b64encode(png_bytes(24, 24, (0, 128, 255))).decode()
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}]
    error = _post(svc, "/v1/chat/completions", {"model": "plain", "messages": messages}, status=400)["error"]
    assert error["message"].startswith("image input is not supported")
    text = oai.chat.completions.create(
        model="vision",
        max_tokens=2,
        messages=[{"role": "user", "content": [{"type": "text", "text": "what is this?"}]}],
    )
    seen = oai.chat.completions.create(model="vision", max_tokens=2, messages=messages)
    assert text.usage is not None and seen.usage is not None
    assert seen.usage.prompt_tokens == text.usage.prompt_tokens + image_tokens()
    corrupt = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    bad = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, corrupt]}]
    error = _post(svc, "/v1/chat/completions", {"model": "vision", "messages": bad}, status=400)["error"]
    assert error["message"] == "Failed to load image or audio file"


@pytest.mark.usefixtures("ffmpeg")
def test_a_video_reaches_the_models_worker_with_the_routers_video_fps(svc: ServiceProcess, oai: openai.OpenAI) -> None:
    """``LLAMA_ARG_VIDEO_FPS=2`` reaches each model's worker: a 1-second video at 4 fps, sent by an
    OpenAI client to the vision model, costs "Video:", the 2 frames ffmpeg keeps at 2 fps and one
    timestamp; ``/props?model=vision`` says video; the audio model refuses it in llama-server's words."""
    clip = video_bytes(1.0, rate=4)
    video = {"type": "video_url", "video_url": {"url": "data:video/mp4;base64," + base64.b64encode(clip).decode()}}
    content = [{"type": "text", "text": "what happens?"}]
    text = oai.chat.completions.create(model="vision", max_tokens=2, messages=[{"role": "user", "content": content}])
    seen = oai.chat.completions.create(
        model="vision", max_tokens=2, messages=[{"role": "user", "content": [*content, video]}]
    )  # type: ignore[list-item]
    texts = sum(
        len(_post(svc, "/tokenize", {"model": "vision", "content": t})["tokens"]) for t in ("Video:", "[0m0.00s]")
    )
    assert text.usage is not None and seen.usage is not None
    assert seen.usage.prompt_tokens == text.usage.prompt_tokens + frames_at(clip, 2.0) * image_tokens() + texts
    props = httpx.get(
        f"{svc.url}/props", params={"model": "vision"}, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ).json()
    assert props["modalities"] == {"vision": True, "video": True, "audio": False}
    refused = [{"role": "user", "content": [*content, video]}]
    error = _post(svc, "/v1/chat/completions", {"model": "audio", "messages": refused}, status=400)["error"]
    assert error["message"].startswith("video input is not supported")


def test_chat_template_file_and_server_kwargs(tmp_path: Path) -> None:
    """``-m FILE --chat-template-file T --chat-template-kwargs J``: T renders the chats (not the
    GGUF's template) with J's variables, which a request's own ``chat_template_kwargs`` override."""
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    template = tmp_path / "custom.jinja"
    template.write_text(
        "{% for m in messages %}[{{ m.role }}@{{ where }}] {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    args = ["-m", str(model), "--chat-template-file", str(template), "--chat-template-kwargs", '{"where": "home"}']
    with ServiceProcess(tmp_path / "home", args=args) as proc:

        def prompt(**extra: Any) -> str:
            answer = httpx.post(
                f"{proc.url}/apply-template", json={"model": "tiny", "messages": ASK, **extra}, timeout=120
            )
            assert answer.status_code == 200, answer.text
            return str(answer.json()["prompt"])

        assert prompt() == "[user@home] What is the weather in Paris?\n[assistant]"
        assert prompt(chat_template_kwargs={"where": "work"}).startswith("[user@work]")
        props = httpx.get(f"{proc.url}/props", params={"model": "tiny"}, timeout=30).json()
        assert props["chat_template"] == template.read_text()


def test_a_bad_template_kwargs_flag_is_refused(tmp_path: Path) -> None:
    """llama-server refuses to start on --chat-template-kwargs that is not a JSON object."""
    import subprocess
    import sys

    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    cmd = [
        sys.executable,
        "-m",
        "service.cli",
        "serve",
        "-m",
        str(model),
        "--chat-template-kwargs",
        "[1]",
        "--home",
        str(tmp_path / "home"),
        "--port",
        "0",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0 and "chat-template-kwargs" in result.stderr


def test_inline_chat_template(tmp_path: Path) -> None:
    """``--chat-template TEXT`` that is no built-in name is the Jinja template itself, as in llama-server."""
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    args = ["-m", str(model), "--chat-template", "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"]
    with ServiceProcess(tmp_path / "home", args=args) as proc:
        answer = httpx.post(f"{proc.url}/apply-template", json={"model": "tiny", "messages": ASK}, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["prompt"] == "<user>What is the weather in Paris?"
        chat = httpx.post(
            f"{proc.url}/v1/chat/completions", json={"model": "tiny", "messages": ASK, "max_tokens": 2}, timeout=120
        )
        assert chat.status_code == 200, chat.text


def test_audio_parts_are_routed_to_an_audio_projector(svc: ServiceProcess, oai: openai.OpenAI) -> None:
    """An OpenAI client's ``input_audio`` part: evaluated by the audio model's projector (its tokens
    counted), llama-server's 400 from a model without one and from the vision-only projector."""
    wav = base64.b64encode(wav_bytes(0.5)).decode()
    part = {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}]
    for model in ("plain", "vision"):
        error = _post(svc, "/v1/chat/completions", {"model": model, "messages": messages}, status=400)["error"]
        assert error["message"].startswith("audio input is not supported"), model
    text = oai.chat.completions.create(
        model="audio", max_tokens=2, messages=[{"role": "user", "content": [{"type": "text", "text": "what is this?"}]}]
    )
    heard = oai.chat.completions.create(model="audio", max_tokens=2, messages=messages)  # type: ignore[arg-type]
    assert text.usage is not None and heard.usage is not None
    assert heard.usage.prompt_tokens == text.usage.prompt_tokens + audio_tokens(0.5)


def test_transcriptions_are_routed_by_the_forms_model(svc: ServiceProcess, oai: openai.OpenAI) -> None:
    """``POST /v1/audio/transcriptions`` through the router: the multipart form's ``model`` field
    picks the worker and the body passes unchanged; the OpenAI client reads the text. A form naming
    no model is the router's 400; a model without an audio projector llama-server's 501."""
    wav = wav_bytes(0.5)
    heard = oai.audio.transcriptions.create(model="audio", file=("a.wav", wav, "audio/wav"))
    assert isinstance(heard.text, str)
    auth = {"Authorization": f"Bearer {KEY}"}
    raw = httpx.post(
        f"{svc.url}/audio/transcriptions",
        data={"model": "audio", "max_tokens": "2"},
        files={"file": ("a.wav", wav, "audio/wav")},
        headers=auth,
        timeout=120,
    )
    assert raw.status_code == 200 and raw.json()["type"] == "transcript.text.done", raw.text
    assert raw.json()["usage"]["input_tokens"] > audio_tokens(0.5)
    nameless = httpx.post(
        f"{svc.url}/v1/audio/transcriptions", files={"file": ("a.wav", wav, "audio/wav")}, headers=auth, timeout=120
    )
    assert nameless.status_code == 400, nameless.text
    with pytest.raises(openai.APIStatusError) as refused:
        oai.audio.transcriptions.create(model="plain", file=("a.wav", wav, "audio/wav"))
    assert refused.value.status_code == 501
    assert refused.value.body == {
        "code": 501,
        "message": "The current model does not support audio input.",
        "type": "not_supported_error",
    }
