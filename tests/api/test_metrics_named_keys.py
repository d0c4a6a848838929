"""Per-model ``/metrics`` series by named key (issue 34), with keys made through ``POST /keys`` and
requests sent with their secrets by the real ``openai`` client: each (model, key) series sums what
that key's client saw in its ``usage``; a key revoked through ``DELETE /keys`` drops out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from devtools.service_process import ServiceProcess
from service.core.keys import FULL as FULL_NAME
from tests.api.metrics_scrape import Samples, value, wait_metric
from tests.api.named_keys import FULL, add_key, full_headers
from tests.e2e.conftest import models_dir

__all__ = ["models_dir"]
pytestmark = pytest.mark.timeout(240)
A, B = "tiny-a", "tiny-b"


@pytest.fixture
def svc(tmp_path: Path, models_dir: Path) -> Iterator[ServiceProcess]:
    env = {"MODELROUTER_MODELS_DIR": str(models_dir), "MODELROUTER_METRICS": "1"}
    with ServiceProcess(tmp_path / "home", args=["--api-key", FULL], env=env) as proc:
        yield proc


def _chat(svc: ServiceProcess, secret: str, model: str) -> int:
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=secret, timeout=60, max_retries=0)
    answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert answer.usage is not None
    return answer.usage.prompt_tokens


def _keys(samples: Samples) -> set[str]:
    return {dict(labels)["key"] for name, labels in samples if name == "modelrouter_prompt_tokens_total"}


def test_each_named_key_has_its_series_and_a_revoked_one_drops_out(svc: ServiceProcess) -> None:
    alice, bob = add_key(svc, "alice", models=[A]), add_key(svc, "bob")
    seen = {("alice", A): [_chat(svc, alice, A), _chat(svc, alice, A)], ("bob", B): [_chat(svc, bob, B)]}
    seen[(FULL_NAME, A)] = [_chat(svc, FULL, A)]
    samples = wait_metric(
        svc,
        lambda s: sum(value(s, "modelrouter_model_requests_total", model=m, key=k, status="2xx") for k, m in seen) == 4,
        "every key's requests counted",
        headers=full_headers(),
    )
    for (key, model), prompts in seen.items():
        assert value(samples, "modelrouter_prompt_tokens_total", model=model, key=key) == sum(prompts) > 0
        assert value(samples, "modelrouter_model_requests_total", model=model, key=key, status="2xx") == len(prompts)
    assert _keys(samples) == {"alice", "bob", FULL_NAME}

    assert httpx.delete(f"{svc.url}/keys/bob", headers=full_headers(), timeout=30).status_code in (200, 204)
    revoked = wait_metric(svc, lambda s: "bob" not in _keys(s), "bob's series gone", headers=full_headers())
    assert _keys(revoked) == {"alice", FULL_NAME}
