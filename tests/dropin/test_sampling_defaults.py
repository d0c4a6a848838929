"""``llama-server -m FILE --temp 0 -n 4 --ignore-eos --grammar-file G``: every request's defaults.

llama-server starts each request's sampling parameters from its command line
and lets the request override each one; ``/props`` shows them. Here with the
``openai`` client and llama-server's own ``/completion``.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import openai
import pytest

from tests.dropin.conftest import Serve
from tests.service_probes import events, wait_for_event


@pytest.mark.timeout(240)
def test_sampling_options_default_every_request_and_the_request_wins(
    serve: Serve, models_dir: Path, tmp_path: Path
) -> None:
    grammar = tmp_path / "ab.gbnf"
    grammar.write_text("root ::= [ab]+\n")
    svc = serve(
        "-m",
        str(models_dir / "tiny-a.gguf"),
        "--temp",
        "0",
        "--top-k",
        "1",
        "-n",
        "4",
        "--ignore-eos",
        "--grammar-file",
        str(grammar),
        "--samplers",
        "top_k;temperature",
    )
    wait_for_event(svc, "instance_ready", model="tiny-a", timeout=90)

    params = httpx.get(f"{svc.url}/props", timeout=30).json()["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["n_predict"]) == (0.0, 1, 4)
    assert params["samplers"] == ["top_k", "temperature"] and params["grammar"] == "root ::= [ab]+\n"

    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="unused", max_retries=0)
    chat = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
    assert chat.usage is not None and chat.usage.completion_tokens == 4, "-n 4 with --ignore-eos: four tokens"
    assert re.fullmatch("[ab]+", chat.choices[0].message.content or ""), chat.choices[0].message.content
    shorter = client.completions.create(model="any", prompt="x", max_tokens=2)
    assert shorter.usage is not None and shorter.usage.completion_tokens == 2, "the request's own length wins"

    native = httpx.post(f"{svc.url}/completion", json={"prompt": "x"}, timeout=120).json()
    assert native["tokens_predicted"] == 4 and re.fullmatch("[ab]+", native["content"]), native
    assert native["generation_settings"]["temperature"] == 0.0
    own = httpx.post(f"{svc.url}/completion", json={"prompt": "x", "grammar": 'root ::= "c"+'}, timeout=120).json()
    assert re.fullmatch("c+", own["content"]), own

    configured = [e for e in events(svc) if e["type"] == "model_configured" and e["model"] == "tiny-a"]
    assert configured[-1]["data"]["params"]["sampling"]["n_predict"] == 4  # recorded for the audit
