"""``/schema`` describes every request and answer: declared bodies, parameters,
answers per status, and problem+json for every error status."""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient

from service.api.controllers import GET_ROUTES, POST_ROUTES

HEALTH = {"/health", "/v1/health"}  # 503 "degraded" is the health answer itself, not a problem


async def _schema(client: AsyncTestClient) -> dict[str, Any]:
    answer = await client.get("/schema/openapi.json")
    assert answer.status_code == 200
    schema: dict[str, Any] = answer.json()
    return schema


# llama.cpp's reload takes no body (whatever is sent is ignored); /cors-proxy and /tools answer their 403 unread.
BODYLESS_POSTS = {"/models/reload", "/cors-proxy", "/tools"}
TRANSCRIPTIONS = {"/v1/audio/transcriptions", "/audio/transcriptions"}


async def test_every_post_declares_its_body_and_every_error_is_a_problem(client: AsyncTestClient) -> None:
    paths = (await _schema(client))["paths"]
    for path, item in paths.items():
        for method, operation in item.items():
            if method == "post" and path in BODYLESS_POSTS:
                assert "requestBody" not in operation, f"POST {path}: declares a body it does not read"
            elif method == "post" and path in TRANSCRIPTIONS:  # OpenAI's multipart form, forwarded unread
                form = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
                assert form["required"] == ["file", "model"] and form["properties"]["file"]["format"] == "binary"
            elif method == "post":
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                declared = body if body.get("type") != "array" else body["items"]  # POST /lora-adapters
                assert "$ref" in declared, f"POST {path}: body not declared"
            for status, answer in operation["responses"].items():
                content = answer.get("content", {})
                if int(status) >= 400 and path.startswith("/api/"):  # Ollama's routes: Ollama's error body
                    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/OllamaError"}
                elif int(status) >= 400 and path not in HEALTH:
                    assert list(content) == ["application/problem+json"], f"{method} {path} {status}"
                    assert content["application/problem+json"]["schema"] == {
                        "$ref": "#/components/schemas/ProblemDetails"
                    }
                elif method != "options":
                    assert content, f"{method} {path} {status}: answer not declared"


async def test_every_routed_endpoint_and_llama_path_is_described(client: AsyncTestClient) -> None:
    paths = (await _schema(client))["paths"]
    for path in (*POST_ROUTES, *TRANSCRIPTIONS):
        assert "post" in paths[path], path
    for path in GET_ROUTES:
        params = {p["name"]: p for p in paths[path]["get"]["parameters"]}
        assert params["model"]["required"] is True
    for path in (
        "/models",
        "/models/load",
        "/models/unload",
        "/models/sse",
        "/props",
        "/metrics",
        "/health",
        "/v1/health",
    ):
        assert path in paths
    assert set(paths["/models"]) == {"get", "post", "delete"}


async def test_chat_messages_are_a_union_tagged_by_role(client: AsyncTestClient) -> None:
    components = (await _schema(client))["components"]["schemas"]
    user = components["UserMessage"]
    assert user["properties"]["role"] == {"type": "string", "const": "user"} or "user" in str(
        user["properties"]["role"]
    )
    assert "content" in user["required"] and "content" not in components["AssistantMessage"].get("required", [])
