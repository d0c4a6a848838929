"""Schema fuzzing (issue 11 §5): schemathesis against ``/schema/openapi.json`` of
a real running service -- tiny real GGUFs in its models dir, the project's Hub
as ``HF_ENDPOINT`` -- with positive and negative generated requests on every
operation except the endless streams (checked by hand below). Zero 5xx, and
every answer conforms to its declared status, content type and schema,
problem+json included.

Harmless by construction: generated names are random, so loads, unloads and
``DELETE /models`` find no model (404), and downloads resolve against the local
test Hub, which has no such repo (404). Bounded: a fixed number of examples per
operation, about a minute of the suite.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from service.api.controllers import POST_ROUTES
from service.api.schemas import ApplyTemplateRequest, ChatRequest
from tests.api.named_keys import FULL, add_key
from tests.e2e.conftest import models_dir

__all__ = ["models_dir"]  # the session fixture of tiny GGUFs

STREAMS = {"/events/stream", "/models/sse"}
EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 5}
# Chat messages are a tagged union of six shapes: generating one costs ~0.3 s, so
# these operations (one body type under seven paths) get fewer examples each.
HEAVY = {p for p, body in POST_ROUTES.items() if body in (ChatRequest, ApplyTemplateRequest)}
HEAVY_EXAMPLES = {GenerationMode.POSITIVE: 5, GenerationMode.NEGATIVE: 3}
KEYED_EXAMPLES = {GenerationMode.POSITIVE: 3, GenerationMode.NEGATIVE: 2}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, hub_server: HubServer) -> Iterator[ServiceProcess]:
    env = {"MODELROUTER_MODELS_DIR": str(models_dir), "HF_ENDPOINT": hub_server.url, "MODELROUTER_MODELS_MAX": "1"}
    # --metrics: /metrics answers (without it, llama-server's 501 for every call, which the fuzz counts as a 5xx).
    with ServiceProcess(tmp_path_factory.mktemp("fuzz"), args=["--metrics"], env=env) as proc:
        yield proc


@pytest.fixture(scope="module")
def keyed(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, hub_server: HubServer
) -> Iterator[tuple[str, str]]:
    """A service with a full key, and the secret of a named key with ``inference`` and ``admin``
    scope over every model (issue 34): the fuzz goes through the named key's path of the middleware."""
    env = {"MODELROUTER_MODELS_DIR": str(models_dir), "HF_ENDPOINT": hub_server.url, "MODELROUTER_MODELS_MAX": "1"}
    args = ["--metrics", "--api-key", FULL]
    with ServiceProcess(tmp_path_factory.mktemp("fuzz-keyed"), args=args, env=env) as proc:
        yield proc.url, add_key(proc, "fuzz", endpoints=["inference", "admin"])


@pytest.mark.timeout(600)
def test_schemathesis_finds_no_5xx_and_no_schema_violation(svc: ServiceProcess) -> None:
    _fuzz_all(svc.url, {}, EXAMPLES, HEAVY_EXAMPLES, at_least=600)


@pytest.mark.timeout(600)
def test_schemathesis_with_a_named_key(keyed: tuple[str, str]) -> None:
    """The same checks through a named key (fewer examples: the middleware's path is what is new)."""
    url, secret = keyed
    _fuzz_all(url, {"Authorization": f"Bearer {secret}"}, KEYED_EXAMPLES, KEYED_EXAMPLES, at_least=200)


def _fuzz_all(
    url: str,
    headers: dict[str, str],
    examples: dict[GenerationMode, int],
    heavy_examples: dict[GenerationMode, int],
    at_least: int,
) -> None:
    schema = schemathesis.openapi.from_url(f"{url}/schema/openapi.json", headers=headers)
    operations = [r.ok() for r in schema.get_all_operations()]
    fuzzed = [op for op in operations if op.path not in STREAMS]
    statuses: collections.Counter[int] = collections.Counter()
    per_operation: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    started = time.monotonic()
    with requests.Session() as client:
        client.headers.update(headers)
        for operation in fuzzed:
            heavy = operation.path in HEAVY
            for mode, count in (heavy_examples if heavy else examples).items():
                _fuzz(operation, mode, count, url, client, statuses, per_operation, failures)
    total = sum(statuses.values())
    print(
        f"\nschemathesis: {total} requests over {len(fuzzed)} operations in {time.monotonic() - started:.0f} s; "
        f"statuses {dict(sorted(statuses.items()))}"
    )
    assert not failures, "\n".join(failures[:20])
    assert total >= at_least
    assert not [s for s in statuses if s >= 500]
    assert {op.label for op in fuzzed} <= set(per_operation), "every operation was exercised"
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def _fuzz(
    operation: Any,
    mode: GenerationMode,
    examples: int,
    svc_url: str,
    client: requests.Session,
    statuses: collections.Counter[int],
    per_operation: collections.Counter[str],
    failures: list[str],
) -> None:
    strategy = operation.as_strategy(generation_mode=mode)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        response = case.call(base_url=svc_url, session=client, timeout=60)
        statuses[response.status_code] += 1
        per_operation[operation.label] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except Exception as exc:  # a failure is collected, so one run reports them all
            failures.append(f"{operation.label} [{mode.value}] {response.status_code}: {str(exc)[:600]}")

    try:
        run()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE, f"{operation.label}: no valid request can be generated"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", sorted(STREAMS))
def test_streams_by_hand(svc: ServiceProcess, path: str) -> None:
    """The endless streams: a bad query or header is a 400 problem, a good one 200 + text/event-stream."""
    bad = [{"params": {"after": "x"}}, {"headers": {"Last-Event-ID": "-3"}}, {"params": {"type": "nope"}}]
    for kwargs in bad if path == "/events/stream" else bad[1:2]:
        answer = httpx.get(f"{svc.url}{path}", timeout=10, **kwargs)
        assert answer.status_code == 400, (kwargs, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
    with httpx.stream("GET", f"{svc.url}{path}", timeout=10) as good:
        assert good.status_code == 200 and good.headers["content-type"].startswith("text/event-stream")
