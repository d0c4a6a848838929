"""Every route of the app has a class a named key's ``endpoints`` is checked against (issue 34):
walked from the app itself, so a new route must be classified here before it ships, and then
called with an inference-only key in-process: admin routes answer 403 ``endpoint_not_allowed``
before routing, the others never do."""

from __future__ import annotations

from dataclasses import replace

import pytest
from litestar.testing import AsyncTestClient

from service.api.auth import PUBLIC_PATHS, PUBLIC_PREFIX
from service.app import create_app
from service.core.keys import ADMIN, INFERENCE, OPEN, endpoint_class
from service.settings import Settings
from tests.api.named_keys import FULL, bearer, full_headers
from tests.dropin.conftest import route_table

INFERENCE_ROUTES = {
    *(f"POST {p}" for p in ("/completion", "/completions", "/v1/completions", "/infill", "/predict")),
    *(f"POST {p}" for p in ("/chat/completions", "/v1/chat/completions", "/v1/chat/completions/control")),
    *(f"POST {p}" for p in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens")),
    *(f"POST {p}" for p in ("/responses", "/v1/responses", "/responses/input_tokens", "/v1/responses/input_tokens")),
    *(f"POST {p}" for p in ("/v1/messages", "/v1/messages/count_tokens")),
    *(f"POST {p}" for p in ("/embedding", "/embeddings", "/v1/embeddings", "/api/embed", "/api/embeddings")),
    *(f"POST {p}" for p in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking")),
    *(f"POST {p}" for p in ("/tokenize", "/detokenize", "/apply-template")),
    *(f"POST {p}" for p in ("/audio/transcriptions", "/v1/audio/transcriptions")),
    "POST /api/chat",
    "POST /api/generate",
    "GET /v1/stream",
    "DELETE /v1/stream",
    "POST /v1/streams/lookup",
    "GET /lora-adapters",
}
OPEN_ROUTES = {
    *(f"GET {p}" for p in ("/health", "/v1/health", "/models", "/v1/models", "/props", "/usage")),
    *(f"GET {p}" for p in ("/api/tags", "/api/ps", "/api/version")),
    "POST /api/show",
    *(f"GET /schema{p}" for p in ("", "/elements", "/oauth2-redirect.html", "/openapi.json", "/openapi.yaml")),
    *(f"GET /schema{p}" for p in ("/openapi.yml", "/rapidoc", "/redoc", "/swagger", "/x")),
}
ADMIN_ROUTES = {
    *(f"POST {p}" for p in ("/models", "/models/load", "/models/unload", "/models/reload")),
    *(f"GET {p}" for p in ("/models/x", "/models/sse", "/downloads", "/downloads/x", "/downloads/x/logs")),
    *("DELETE /models", "DELETE /downloads/x"),
    *(f"GET {p}" for p in ("/events", "/events/stream", "/logs/stream", "/metrics", "/nodes", "/slots")),
    *("POST /slots/0", "POST /props", "POST /lora-adapters"),
    *("GET /keys", "POST /keys", "PATCH /keys/x", "DELETE /keys/x"),
    *(f"POST /api/{p}" for p in ("pull", "copy", "create", "push")),
    "DELETE /api/delete",
    *("GET /tools", "POST /tools", "GET /cors-proxy", "POST /cors-proxy"),  # llama-server's server-side tools
}
EXPECTED = {**dict.fromkeys(INFERENCE_ROUTES, INFERENCE), **dict.fromkeys(OPEN_ROUTES, OPEN)}
EXPECTED |= dict.fromkeys(ADMIN_ROUTES, ADMIN)


def _public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX)


@pytest.mark.parametrize("single", [False, True], ids=["router", "single-model"])
def test_every_route_of_the_app_is_classified(single: bool, settings: Settings) -> None:
    mode = replace(settings, model_file=settings.home / "m.gguf") if single else settings
    routes = {f"{method} {path}": endpoint_class(method, path) for method, path in route_table(mode)}
    routes = {route: kind for route, kind in routes.items() if not _public(route.split(" ", 1)[1])}
    unlisted = sorted(set(routes) - set(EXPECTED))
    assert not unlisted, f"classify these routes in service.core.keys and here: {unlisted}"
    wrong = {route: (kind, EXPECTED[route]) for route, kind in routes.items() if kind != EXPECTED[route]}
    assert not wrong, wrong


@pytest.mark.timeout(120)
async def test_an_inference_key_is_refused_exactly_the_admin_routes(settings: Settings) -> None:
    app = create_app(replace(settings, api_keys=(FULL,)))
    async with AsyncTestClient(app=app) as client:
        made = await client.post("/keys", json={"name": "chat", "models": ["m"]}, headers=full_headers())
        secret = made.json()["secret"]
        for method, path in route_table(settings):
            if _public(path) or path in ("/events/stream", "/models/sse", "/logs/stream"):
                continue  # the streams never end: their class is checked above
            answer = await client.request(method, path, headers=bearer(secret))
            refused = answer.status_code == 403 and "may not call admin routes" in answer.text
            assert refused == (endpoint_class(method, path) == ADMIN), (method, path, answer.status_code, answer.text)
            assert answer.status_code != 401, (method, path)
