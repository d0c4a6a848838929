"""Bad input is a 4xx problem, never a 5xx (issue 11 §1.5, §1.6, §2).

Each test here failed before its fix (500s, a silent empty page, a wrong Allow).
"""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

DEEP = b'{"model":' + b"[" * 100_000
CONTROL_ROUTES = ["/models", "/models/load", "/models/unload"]
PROXY_ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/chat/completions", "/tokenize"]


def _is_problem(answer: object, status: int) -> dict[str, object]:
    assert answer.status_code == status, answer.text  # type: ignore[attr-defined]
    assert answer.headers["content-type"].startswith("application/problem+json")  # type: ignore[attr-defined]
    body: dict[str, object] = answer.json()  # type: ignore[attr-defined]
    assert body["status"] == status and body["detail"]
    error = body["error"]
    assert isinstance(error, dict) and error["code"] == status and error["message"]
    return body


@pytest.mark.parametrize("path", PROXY_ROUTES)
async def test_deeply_nested_json_is_400(client: AsyncTestClient, path: str) -> None:
    answer = await client.post(path, content=DEEP, headers={"content-type": "application/json"})
    body = _is_problem(answer, 400)
    assert "nest" in str(body["detail"])


@pytest.mark.parametrize("path", CONTROL_ROUTES)
async def test_deeply_nested_json_on_control_routes_is_413(client: AsyncTestClient, path: str) -> None:
    """100 kB is past the control routes' body limit (64 KiB): refused before it is parsed."""
    answer = await client.post(path, content=DEEP, headers={"content-type": "application/json"})
    body = _is_problem(answer, 413)
    assert body["limit"] == 64 * 1024 and "65536" in str(body["detail"])


@pytest.mark.parametrize("path", CONTROL_ROUTES + PROXY_ROUTES)
async def test_deep_but_complete_json_is_400(client: AsyncTestClient, path: str) -> None:
    raw = b'{"model":"a/b","x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    _is_problem(await client.post(path, content=raw, headers={"content-type": "application/json"}), 400)


@pytest.mark.parametrize("after", ["9223372036854775808", "\u00b2", "-1", "99999999999999999999999"])
@pytest.mark.parametrize("path", ["/events", "/events/stream"])
async def test_out_of_range_or_unicode_positions_are_400(client: AsyncTestClient, path: str, after: str) -> None:
    body = _is_problem(await client.get(path, params={"after": after}), 400)
    assert "after" in str(body["detail"])


@pytest.mark.parametrize("path", ["/events", "/events/stream"])
async def test_unknown_event_type_is_400_listing_the_known_ones(client: AsyncTestClient, path: str) -> None:
    body = _is_problem(await client.get(path, params={"type": "download_finshed"}), 400)
    assert "download_finished" in str(body["detail"]) and "download_finished" in body["known_types"]  # type: ignore[operator]
    body = _is_problem(await client.get(path, params={"type": "nothing_*"}), 400)
    assert "instance_ready" in body["known_types"]  # type: ignore[operator]


async def test_known_types_and_prefixes_are_accepted(client: AsyncTestClient) -> None:
    answer = await client.get("/events", params=[("type", "download_*"), ("type", "instance_ready")])
    assert answer.status_code == 200


@pytest.mark.parametrize("path", ["/events", "/events/stream", "/models", "/downloads"])
@pytest.mark.parametrize("value", ["a\x00b", "x\ny", "\x1b[31m", "\x7f"])
async def test_control_characters_in_a_query_value_are_400(client: AsyncTestClient, path: str, value: str) -> None:
    _is_problem(await client.get(path, params={"model": value}), 400)


async def test_stream_after_beyond_the_head_is_400(client: AsyncTestClient) -> None:
    head = (await client.get("/health")).json()["position"]
    body = _is_problem(await client.get("/events/stream", params={"after": head + 1000}), 400)
    assert str(head) in str(body["detail"])
    body = _is_problem(await client.get("/events/stream", headers={"Last-Event-ID": str(head + 1000)}), 400)


@pytest.mark.parametrize("last_id", ["abc", "-1", "\u00b2", "9223372036854775808"])
@pytest.mark.parametrize("path", ["/events/stream", "/models/sse"])
async def test_bad_last_event_id_is_400_on_both_streams(client: AsyncTestClient, path: str, last_id: str) -> None:
    body = _is_problem(await client.get(path, headers={"Last-Event-ID": last_id.encode()}), 400)
    assert "Last-Event-ID" in str(body["detail"])


async def test_models_sse_last_event_id_beyond_the_head_is_400(client: AsyncTestClient) -> None:
    head = (await client.get("/health")).json()["position"]
    _is_problem(await client.get("/models/sse", headers={"Last-Event-ID": str(head + 5)}), 400)


async def test_options_models_lists_every_method(client: AsyncTestClient) -> None:
    answer = await client.options("/models")
    assert answer.status_code == 200, "a CORS preflight, answered 200 as llama-server answers every OPTIONS"
    allowed = {m.strip() for m in answer.headers["allow"].split(",")}
    assert {"GET", "POST", "DELETE", "OPTIONS"} <= allowed


BAD_NAMES = [
    "",
    "   ",
    "no-slash",
    "a/b/c",
    "-bad/start",
    "user/repo--x",
    "user/re..po",
    "user/repo.git",
    "user/repo:",
    "user/repo:Q4 K",
    "user/repo@",
    "user/repo@main:Q4_K_M",
    "user/" + "r" * 100,
    "user/repo\x00",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
async def test_download_names_follow_the_hub_grammar(client: AsyncTestClient, name: str) -> None:
    body = _is_problem(await client.post("/models", json={"model": name}), 400)
    assert body["type"] in ("/problems/invalid_name", "/problems/invalid_request")


@pytest.mark.parametrize("path", ["/models/load", "/models/unload", "/models", "/v1/chat/completions"])
async def test_names_have_a_bounded_length(client: AsyncTestClient, path: str) -> None:
    body = {"model": "a/" + "b" * 600, "messages": [{"role": "user", "content": "x"}]}
    answer = _is_problem(await client.post(path, json=body), 400)
    assert "model" in str(answer["detail"])
    _is_problem(await client.delete("/models", params={"model": "x" * 600}), 400)


@pytest.mark.parametrize("model", [None, 5, [], {}, True])
async def test_model_must_be_a_string(client: AsyncTestClient, model: object) -> None:
    body = _is_problem(await client.post("/models/load", json={"model": model}), 400)
    assert body["errors"][0]["key"] == "model"  # type: ignore[index]
