"""The workers' secrets, and the HTTP clients that send them (:mod:`service.supervision.worker_keys`),
against real loopback servers locked by the worker's own lock."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx

from service.core import events as ev
from service.core import worker_key
from service.core.event_base import Recorded
from service.core.state import RouterState
from service.outside.hop_client import hop_client
from service.supervision.heartbeats import Heartbeats
from service.supervision.worker_keys import WorkerKeys
from tests.supervision.fakes import FakeClock, until
from tests.supervision.worker_answers import answering

HEALTH = {"/health": (200, b'{"status":"ok"}')}


def _loading(instance_id: str, endpoint: str) -> Recorded:
    event = ev.InstanceLoading(instance_id=instance_id, pid=1, endpoint=endpoint)
    return Recorded(1, f"e-{instance_id}", "m", event, {}, datetime.now(UTC))


def _client(keys: WorkerKeys) -> httpx.AsyncClient:
    return hop_client(httpx.Timeout(10.0), httpx.Limits(), auth=keys)


def test_each_worker_gets_its_own_fresh_secret_in_its_environment_and_no_repr_shows_it() -> None:
    keys = WorkerKeys()
    first, second = keys.issue("i1")[worker_key.ENV], keys.issue("i2")[worker_key.ENV]
    assert first != second and len(first) >= 43  # token_urlsafe(32): 256 random bits
    assert first not in repr(keys) and second not in repr(keys)
    assert keys.issue("i1")[worker_key.ENV] != first  # a respawn of the same instance: a new one


async def test_the_client_signs_requests_to_our_worker_once_it_reported_its_endpoint() -> None:
    keys, seen = WorkerKeys(), []
    secret = keys.issue("i1")[worker_key.ENV]
    async with _client(keys) as client:
        with answering(HEALTH, key=secret, seen=seen) as url:
            refused = await client.get(url + "/health")  # its endpoint not reported yet: nothing to send
            assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
            keys.on_event(_loading("i1", url), RouterState())
            assert (await client.get(url + "/health")).status_code == 200
            assert seen[-1][worker_key.HEADER] == secret
            keys.forget("i1")  # the worker is gone: its port may become anyone's
            assert (await client.get(url + "/health")).status_code == 401
            assert worker_key.HEADER not in seen[-1]


async def test_a_port_taken_over_by_a_newer_worker_keeps_the_newer_ones_secret() -> None:
    """The old worker's exit may be handled after its successor reported the same port."""
    keys = WorkerKeys()
    keys.issue("old")
    newer = keys.issue("new")[worker_key.ENV]
    async with _client(keys) as client:
        with answering(HEALTH, key=newer) as url:
            keys.on_event(_loading("old", url), RouterState())
            keys.on_event(_loading("new", url), RouterState())
            keys.forget("old")
            assert (await client.get(url + "/health")).status_code == 200


async def test_anything_else_gets_no_secret_not_even_a_worker_of_another_node() -> None:
    keys, seen = WorkerKeys(), []
    keys.issue("ours")
    async with _client(keys) as client:
        with answering(HEALTH, seen=seen) as other:
            keys.on_event(_loading("theirs", other), RouterState())  # another node's worker, on this machine
            assert (await client.get(other + "/health")).status_code == 200
    assert seen and all(worker_key.HEADER not in headers for headers in seen)


async def test_the_heartbeats_reach_a_locked_worker_with_its_secret() -> None:
    keys, clock = WorkerKeys(), FakeClock()
    secret = keys.issue("i1")[worker_key.ENV]
    beat = json.dumps({"steps": 3, "step_s": None, "waiting": 0}).encode()
    beats = Heartbeats(clock, auth=keys)
    with answering({"/engine/heartbeat": (200, beat)}, key=secret) as url:
        keys.on_event(_loading("i1", url), RouterState())
        beats.watch({"i1": url}, busy={url})
        await until(lambda: beats.beats["i1"].steps == 3, what="the locked worker's beat heard")
    await beats.close()
