"""llama-server's own endpoints through the router (issue 8 §6): ``/tokenize``, ``/detokenize``,
``/apply-template``, ``GET /props?model=``, native ``/completion``, ``/v1/chat/completions/control``
(issue 29 §5), and 501 for the rest.

Shapes from llama.cpp's ``tools/server/README.md`` and ``server-context.cpp``
(``post_tokenize``, ``post_detokenize``, ``post_apply_template``,
``get_res_props``, ``server_task_result_cmpl_*::to_json_non_oaicompat``). The
service is started with a llama-server command line (``--models-dir``) over
tiny real GGUFs whose vocabulary is known (``devtools.tiny_gguf``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import BOS_ID, CHATML_TEMPLATE, IM_START_ID, TOOLS_TEMPLATE, write_tiny_gguf
from tests.chat_control import NOT_FOUND, assert_control_ends_reasoning, assert_control_refusals, control


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("llama-endpoints")
    write_tiny_gguf(root / "models" / "tiny.gguf")
    write_tiny_gguf(root / "models" / "think.gguf", chat_template=TOOLS_TEMPLATE, n_ctx=256)  # opens <think>
    # --context-shift: a chat with no max_tokens never ends by itself (tests.chat_control)
    with ServiceProcess(root / "home", args=["--models-dir", str(root / "models"), "--context-shift"]) as proc:
        yield proc


def _post(svc: ServiceProcess, path: str, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{svc.url}{path}", json={"model": "tiny", **body}, timeout=60)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _error(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == status and error["message"]
    return error


@pytest.mark.timeout(120)
def test_tokenize_and_detokenize(svc: ServiceProcess) -> None:
    plain = _post(svc, "/tokenize", content="hi")
    assert set(plain) == {"tokens"} and all(isinstance(t, int) for t in plain["tokens"])
    assert BOS_ID not in plain["tokens"], "add_special defaults to false"
    assert _post(svc, "/tokenize", content="hi", add_special=True)["tokens"] == [BOS_ID, *plain["tokens"]]
    assert _post(svc, "/detokenize", tokens=plain["tokens"])["content"].strip() == "hi"

    # parse_special defaults to true: the control token's text is one token, else bytes.
    assert _post(svc, "/tokenize", content="<|im_start|>")["tokens"][-1] == IM_START_ID
    assert IM_START_ID not in _post(svc, "/tokenize", content="<|im_start|>", parse_special=False)["tokens"]

    # Mixed content: token ids pass through where they stand.
    mixed = _post(svc, "/tokenize", content=["a", IM_START_ID, "b"])["tokens"]
    a, b = (_post(svc, "/tokenize", content=s)["tokens"] for s in ("a", "b"))
    assert mixed == [*a, IM_START_ID, *b]

    # with_pieces: {id, piece}; a piece that is not valid UTF-8 (half of "é") is a list of bytes.
    pieces = _post(svc, "/tokenize", content="é", with_pieces=True)["tokens"]
    assert all(set(p) == {"id", "piece"} for p in pieces)
    byte_pieces = [p["piece"] for p in pieces if isinstance(p["piece"], list)]
    assert bytes(b for piece in byte_pieces for b in piece) == "é".encode()
    text = _post(svc, "/tokenize", content="hi", with_pieces=True)["tokens"]
    assert [p["id"] for p in text] == plain["tokens"]
    assert "".join(p["piece"] for p in text) == _post(svc, "/detokenize", tokens=plain["tokens"])["content"]

    assert _post(svc, "/tokenize")["tokens"] == [] and _post(svc, "/detokenize")["content"] == ""
    answer = httpx.post(f"{svc.url}/detokenize", json={"model": "tiny", "tokens": [10**6]}, timeout=30)
    assert "token ids" in _error(answer, 400)["message"]


@pytest.mark.timeout(120)
def test_apply_template_renders_the_models_chat_template(svc: ServiceProcess) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    prompt = _post(svc, "/apply-template", messages=messages)
    assert prompt == {
        "prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    }
    bad = httpx.post(f"{svc.url}/apply-template", json={"model": "tiny", "messages": [{"role": "x"}]}, timeout=30)
    _error(bad, 400)


@pytest.mark.timeout(120)
def test_props_of_a_model(svc: ServiceProcess) -> None:
    answer = httpx.get(f"{svc.url}/props", params={"model": "tiny"}, timeout=60)
    assert answer.status_code == 200, answer.text
    props = answer.json()
    settings = props["default_generation_settings"]
    assert isinstance(settings["n_ctx"], int) and settings["n_ctx"] > 0
    assert settings["params"]["n_predict"] == -1 and isinstance(settings["params"]["temperature"], float)
    slots = httpx.get(f"{svc.url}/slots", params={"model": "tiny"}, timeout=30).json()
    assert props["total_slots"] == len(slots) >= 1
    assert all(slot["n_ctx"] == settings["n_ctx"] for slot in slots)
    assert props["model_alias"] == "tiny" and props["model_path"].endswith("tiny.gguf")
    assert props["chat_template"] == CHATML_TEMPLATE
    assert props["modalities"] == {"vision": False, "video": False, "audio": False}
    assert props["bos_token"] == "<s>" and props["eos_token"] == "<|im_end|>"  # the GGUF's EOS id
    assert props["build_info"].startswith("b") and props["is_sleeping"] is False
    entry = next(m for m in httpx.get(f"{svc.url}/v1/models", timeout=30).json()["data"] if m["id"] == "tiny")
    assert entry["meta"]["n_ctx"] == settings["n_ctx"] and entry["meta"]["ftype"] == "F16", "a loaded model's meta"
    # Changing properties needs llama-server's --props (tests/dropin/test_admin_router.py starts serve with it).
    error = _error(httpx.post(f"{svc.url}/props", json={"model": "tiny"}, timeout=30), 501)
    assert error["type"] == "not_supported_error"


def _stream(svc: ServiceProcess, body: dict[str, Any]) -> list[str]:
    with httpx.stream("POST", f"{svc.url}/completion", json={"model": "tiny", **body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return [line for line in r.iter_lines() if line]


@pytest.mark.timeout(120)
def test_native_completion(svc: ServiceProcess) -> None:
    body = {"prompt": "once upon", "n_predict": 6, "temperature": 0.0}
    whole = _post(svc, "/completion", **body)
    assert whole["stop"] is True and isinstance(whole["content"], str) and whole["model"] == "tiny"
    assert whole["stop_type"] in ("limit", "eos") and whole["stopping_word"] == ""
    assert whole["tokens_predicted"] == whole["timings"]["predicted_n"] <= 6
    if whole["stop_type"] == "limit":
        assert whole["tokens_predicted"] == 6
    prompt_tokens = _post(svc, "/tokenize", content="once upon", add_special=True)["tokens"]
    assert whole["tokens_evaluated"] == len(prompt_tokens)
    assert whole["generation_settings"]["n_predict"] == 6 and whole["generation_settings"]["temperature"] == 0.0
    # llama-server's prompt: the tokens evaluated, detokenized with the special ones (the BOS)
    assert whole["prompt"] == "<s> once upon" and isinstance(whole["id_slot"], int) and whole["id_slot"] >= 0
    assert whole["tokens_cached"] >= whole["tokens_evaluated"] and whole["has_new_line"] == ("\n" in whole["content"])
    assert "choices" not in whole

    # Streamed: data lines of partial results, the last one whole with stop=true, no [DONE].
    lines = _stream(svc, body)
    assert all(line.startswith("data: ") for line in lines) and "data: [DONE]" not in lines
    chunks = [json.loads(line[6:]) for line in lines]
    *partial, last = chunks
    assert all(c["stop"] is False and set(c) >= {"content", "tokens_predicted", "tokens_evaluated"} for c in partial)
    assert (
        last["stop"] is True and last["content"] == "" and last["timings"]["predicted_n"] == whole["tokens_predicted"]
    )
    assert "".join(c["content"] for c in partial) == whole["content"], "temperature 0: same text streamed or not"
    assert last["tokens_evaluated"] == whole["tokens_evaluated"] and last["stop_type"] == whole["stop_type"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", ["/infill", "/rerank"])
def test_what_the_worker_cannot_serve_is_501(svc: ServiceProcess, path: str) -> None:
    body = {"model": "tiny", "input_prefix": "a", "content": "a", "query": "q", "documents": ["d"], "input": "x"}
    error = _error(httpx.post(f"{svc.url}{path}", json=body, timeout=60), 501)
    # llama-server's own words where it has them ("This server does not support reranking. ...").
    assert error["type"] == "not_supported_error" and (
        "not supported" in error["message"] or "does not support" in error["message"]
    )


@pytest.mark.timeout(120)
def test_chat_completions_without_v1(svc: ServiceProcess) -> None:
    """llama-server serves OpenAI's chat at ``/chat/completions`` too, with its ``timings`` added."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0}
    whole = _post(svc, "/chat/completions", **body)
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["role"] == "assistant"
    assert whole["usage"]["completion_tokens"] == whole["timings"]["predicted_n"]
    with httpx.stream("POST", f"{svc.url}/chat/completions", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] is not None and "predicted_n" in chunks[-1]["timings"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == whole["choices"][0]["message"]["content"], "temperature 0: same text streamed or not"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("named", [{"model": "think"}, {}], ids=["model-named", "by-id"])
def test_chat_control_ends_the_reasoning_of_a_running_chat(svc: ServiceProcess, named: dict[str, Any]) -> None:
    """llama-server's router sends ``/v1/chat/completions/control`` to the body's ``model``; without one
    (which it refuses), the router finds the worker that runs the completion's id. Either way the
    chat's reasoning ends and its answer follows, and the refusals are llama-server's."""
    assert_control_ends_reasoning(svc.url, {"model": "think"}, named)
    assert_control_refusals(svc.url, {"model": "think"}, named)


@pytest.mark.timeout(120)
def test_chat_control_by_id_asks_only_running_models(svc: ServiceProcess) -> None:
    """A control naming no model loads none: with nothing running it is llama-server's not found."""
    for model in ("think", "tiny"):
        httpx.post(f"{svc.url}/models/unload", json={"model": model}, timeout=60)
    assert control(svc.url, {"id": "chatcmpl-x", "action": "reasoning_end"}) == NOT_FOUND
    listed = httpx.get(f"{svc.url}/models", timeout=30).json()["data"]
    assert all(m["status"]["value"] != "loaded" for m in listed), listed


@pytest.mark.timeout(60)
def test_predict_is_not_served_without_the_prediction_mode(svc: ServiceProcess) -> None:
    """Without ``AIP_MODE=PREDICTION`` (llama-server then has no ``/predict``), even an empty one is a 404."""
    answer = httpx.post(f"{svc.url}/predict", json={"instances": []}, timeout=30)
    assert _error(answer, 404)["type"] == "not_found_error"
