"""service/core/key_commands.py: ``keys add``, a scope change, ``keys revoke`` as events (issue 34)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import service.core.events as ev
from service.core.errors import CommandRejected
from service.core.fold import fold
from service.core.key_commands import ScopeRequest, current_scope, decide_change, decide_create, decide_revoke
from service.core.keys import KeyScope
from service.core.state import RouterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDS = {"key_id": "0123456789ab", "salt": "00" * 16, "digest": "ab" * 32}


def _then(state: RouterState, event: ev.Event) -> RouterState:
    return fold(state, ev.Recorded(state.position + 1, f"e{state.position + 1}", None, event, {}, T0))


def _with_chat() -> RouterState:
    return _then(RouterState(), decide_create(RouterState(), "chat", ScopeRequest(models=("a/*",)), **IDS))


def test_a_key_is_created_with_its_digest_never_a_secret() -> None:
    created = decide_create(RouterState(), "chat", ScopeRequest(models=("a/*",), rpm=10), **IDS)
    assert (created.name, created.key_id, created.digest, created.models, created.rpm) == (
        "chat",
        "0123456789ab",
        "ab" * 32,
        ("a/*",),
        10,
    )
    state = _then(RouterState(), created)
    assert state.keys["chat"].scope == KeyScope(models=("a/*",), rpm=10)


@pytest.mark.parametrize(
    ("name", "scope", "code"),
    [
        ("chat", ScopeRequest(), "conflict"),  # a live name
        ("api-key", ScopeRequest(), "invalid_request"),
        ("bad name", ScopeRequest(), "invalid_request"),
        ("x", ScopeRequest(endpoints=()), "invalid_request"),
        ("x", ScopeRequest(endpoints=("root",)), "invalid_request"),
        ("x", ScopeRequest(rpm=0), "invalid_request"),
        ("x", ScopeRequest(max_keep_alive=-1), "invalid_request"),
        ("x", ScopeRequest(models=("",)), "invalid_request"),
    ],
)
def test_a_bad_creation_is_refused(name: str, scope: ScopeRequest, code: str) -> None:
    with pytest.raises(CommandRejected) as refused:
        decide_create(_with_chat(), name, scope, **{**IDS, "key_id": "ffffffffffff"})
    assert refused.value.code == code


def test_a_key_id_collision_is_refused() -> None:
    with pytest.raises(CommandRejected, match="collision"):
        decide_create(_with_chat(), "other", ScopeRequest(), **IDS)


def test_a_change_replaces_the_scope_and_keeps_the_secret() -> None:
    state = _with_chat()
    before = state.keys["chat"]
    changed = decide_change(state, "chat", ScopeRequest(models=("b",), endpoints=("inference", "admin")))
    after = _then(state, changed).keys["chat"]
    assert after.scope.models == ("b",) and after.scope.endpoints == ("inference", "admin")
    assert (after.key_id, after.digest) == (before.key_id, before.digest) and after.changed_at == T0
    with pytest.raises(CommandRejected) as missing:
        decide_change(state, "nobody", ScopeRequest())
    assert missing.value.code == "key_not_found"


def test_current_scope_round_trips() -> None:
    scope = ScopeRequest(models=("a",), rpm=5, tpm=7, max_keep_alive=30.0, expires_at=T0.isoformat(), priority=2)
    state = _then(RouterState(), decide_create(RouterState(), "k", scope, **IDS))
    assert current_scope(state.keys["k"].scope) == scope


def test_a_revocation_drops_the_key_and_a_second_is_refused() -> None:
    state = _then(_with_chat(), decide_revoke(_with_chat(), "chat"))
    assert "chat" not in state.keys
    with pytest.raises(CommandRejected) as again:
        decide_revoke(state, "chat")
    assert again.value.code == "key_not_found"
