"""Fields of llama-server's answers that ``bench/compare_llama_server.py`` found missing, each as
llama-server (the llama.cpp llama-cpp-python 0.3.36 vendors) sent it for the same request on the
same tiny model: ``system_fingerprint``, ``usage.prompt_tokens_details``, usage on a completion
stream's last chunk, logprobs ``content`` entries with token ids, the whole ``generation_settings``
and ``/props``' ``model_ftype``, ``chat_template_caps``, ``ui``, ``ui_settings`` and
``cors_proxy_enabled``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from devtools.tiny_gguf import CHATML_TEMPLATE
from tests.workers.conftest import WorkerProc
from workers.inference.http.chat._template_caps import DEFAULTS, template_caps

CHAT = [{"role": "user", "content": "hi"}]
# llama-server's task_params::to_json keys (a request's generation_settings)
SETTINGS = {
    "seed",
    "temperature",
    "dynatemp_range",
    "dynatemp_exponent",
    "top_k",
    "top_p",
    "min_p",
    "top_n_sigma",
    "xtc_probability",
    "xtc_threshold",
    "typical_p",
    "repeat_last_n",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "adaptive_target",
    "adaptive_decay",
    "stop",
    "max_tokens",
    "n_predict",
    "n_keep",
    "n_discard",
    "ignore_eos",
    "stream",
    "logit_bias",
    "n_probs",
    "min_keep",
    "grammar",
    "grammar_lazy",
    "grammar_triggers",
    "preserved_tokens",
    "chat_format",
    "reasoning_format",
    "reasoning_in_content",
    "generation_prompt",
    "samplers",
    "speculative.types",
    "timings_per_token",
    "post_sampling_probs",
    "backend_sampling",
    "lora",
}


def _post(url: str, path: str, **body: Any) -> Any:
    r = httpx.post(url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _stream(url: str, path: str, **body: Any) -> list[dict[str, Any]]:
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        return [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: ") and x != "data: [DONE]"]


@pytest.mark.timeout(90)
def test_openai_objects_carry_the_fingerprint_and_usage_details(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    props = httpx.get(f"{url}/props", timeout=30).json()
    whole = _post(url, "/v1/completions", prompt="abc", max_tokens=3, temperature=0)
    assert whole["system_fingerprint"] == props["build_info"]
    assert whole["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    again = _post(url, "/v1/completions", prompt="abc", max_tokens=3, temperature=0)  # the prompt is cached now
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    chunks = _stream(url, "/v1/completions", prompt="abc", max_tokens=3, temperature=0)
    assert all(c["system_fingerprint"] == props["build_info"] for c in chunks)
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] is not None
    assert last["usage"]["completion_tokens"] == 3 and "prompt_tokens_details" in last["usage"]
    chat = _post(url, "/v1/chat/completions", messages=CHAT, max_tokens=2)
    assert chat["system_fingerprint"] == props["build_info"]
    chat_chunks = _stream(
        url, "/v1/chat/completions", messages=CHAT, max_tokens=2, stream_options={"include_usage": True}
    )
    assert all(c["system_fingerprint"] == props["build_info"] for c in chat_chunks)


@pytest.mark.timeout(90)
def test_logprobs_content_entries_name_their_token_ids(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    out = _post(url, "/v1/completions", prompt="abc", max_tokens=2, logprobs=2, temperature=0)
    lp = out["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == 2  # OpenAI's legacy fields stay
    assert [e["logprob"] for e in lp["content"]] == lp["token_logprobs"]
    for entry in lp["content"]:
        assert set(entry) == {"id", "token", "bytes", "logprob", "top_logprobs"}
        assert isinstance(entry["id"], int) and len(entry["top_logprobs"]) == 2
        assert all(set(t) == {"id", "token", "bytes", "logprob"} for t in entry["top_logprobs"])
    ids = [e["id"] for e in lp["content"]]
    native = _post(url, "/completion", prompt="abc", n_predict=2, n_probs=2, temperature=0)
    assert [p["id"] for p in native["completion_probabilities"]] == ids
    chat = _post(url, "/v1/chat/completions", messages=CHAT, max_tokens=2, logprobs=True, top_logprobs=1)
    content = chat["choices"][0]["logprobs"]["content"]
    assert content and all(isinstance(e["id"], int) and len(e["top_logprobs"]) == 1 for e in content)
    assert all(isinstance(t["id"], int) for e in content for t in e["top_logprobs"])


@pytest.mark.timeout(90)
def test_generation_settings_are_llama_servers_whole_set(ready_worker: WorkerProc) -> None:
    url = ready_worker.endpoint
    out = _post(url, "/completion", prompt="abc", n_predict=2, n_keep=3, logit_bias=[[5, -1.0]], ignore_eos=True)
    settings = out["generation_settings"]
    assert set(settings) == SETTINGS
    assert settings["max_tokens"] == settings["n_predict"] == 2 and settings["n_keep"] == 3
    assert settings["ignore_eos"] is True and settings["stream"] is False
    assert {"bias": -1.0, "token": 5} in settings["logit_bias"]
    assert any(
        b["bias"] is None for b in settings["logit_bias"]
    )  # ignore_eos: -inf, null in JSON as nlohmann writes it
    props = httpx.get(f"{url}/props", timeout=30).json()
    params = props["default_generation_settings"]["params"]
    assert {
        "max_tokens",
        "n_keep",
        "n_discard",
        "ignore_eos",
        "stream",
        "min_keep",
        "chat_format",
        "speculative.types",
        "timings_per_token",
        "post_sampling_probs",
        "backend_sampling",
        "lora",
    } <= set(params)
    assert params["max_tokens"] == -1 and params["chat_format"] == "Content-only"


@pytest.mark.timeout(60)
def test_props_names_the_file_type_and_the_templates_capabilities(ready_worker: WorkerProc) -> None:
    props = httpx.get(f"{ready_worker.endpoint}/props", timeout=30).json()
    assert props["model_ftype"] == "F16"  # the tiny GGUF's tensors, as llama-server named them
    assert props["ui"] is False and props["ui_settings"] == {} and props["cors_proxy_enabled"] is False
    assert props["chat_template_caps"] == template_caps(props["chat_template"])


def test_chatml_capabilities_are_what_llama_server_reported() -> None:
    """llama-server's ``chat_template_caps`` for the tiny GGUF's ChatML template (no tools in it)."""
    assert template_caps(CHATML_TEMPLATE) == {
        **DEFAULTS,
        "supports_tools": False,
        "supports_tool_calls": False,
        "supports_parallel_tool_calls": False,
    }


def test_a_template_with_tools_typed_content_and_reasoning_effort() -> None:
    source = (
        "{% if tools %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif %}"
        "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
        "{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}"
        "{% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}"
        "{% endfor %}{{ reasoning_effort or '' }}"
    )
    caps = template_caps(source)
    assert caps["supports_tools"] and caps["supports_tool_calls"] and caps["supports_parallel_tool_calls"]
    assert caps["supports_typed_content"] and caps["supports_string_content"] and caps["supports_object_arguments"]
    assert caps["supports_reasoning_effort"] and not caps["supports_preserve_reasoning"]
    assert template_caps("{% if %}") == DEFAULTS  # does not parse: llama.cpp's defaults
