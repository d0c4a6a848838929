"""service/core/keys.py: secrets, the scope rules and the route classes (issue 34). Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.core.keys import (
    ADMIN,
    FULL_PRINCIPAL,
    INFERENCE,
    OPEN,
    KeyScope,
    NamedKey,
    Principal,
    capped_keep_alive,
    check_endpoint,
    check_model,
    digest_secret,
    endpoint_class,
    expired,
    find_key,
    name_problem,
    secret_key_id,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SALT = "00" * 16
SECRET = "mr-0123456789ab-tokentokentoken"


def _key(name: str = "chat", key_id: str = "0123456789ab", secret: str = SECRET, **scope: object) -> NamedKey:
    return NamedKey(name, key_id, SALT, digest_secret(SALT, secret), KeyScope(**scope), T0)  # type: ignore[arg-type]


class TestSecrets:
    def test_the_key_id_is_read_from_the_secret_only_when_well_formed(self) -> None:
        assert secret_key_id(SECRET) == "0123456789ab" and secret_key_id(SECRET.encode()) == "0123456789ab"
        for bad in ("sk-0123456789ab-x", "mr-0123456789ab", "mr-0123456789ab-", "mr-XYZ456789abc-t", "mr-0123-t"):
            assert secret_key_id(bad) is None, bad

    def test_a_key_is_found_by_its_whole_secret(self) -> None:
        keys = {"chat": _key(), "ops": _key("ops", "ffffffffffff", "mr-ffffffffffff-other")}
        assert find_key(keys, SECRET.encode()) == keys["chat"]
        assert find_key(keys, b"mr-ffffffffffff-other") == keys["ops"]
        assert find_key(keys, SECRET.encode() + b"x") is None, "the right id with a wrong token"
        assert find_key(keys, b"mr-0123456789aa-tokentokentoken") is None
        assert find_key(keys, None) is None and find_key({}, SECRET.encode()) is None

    def test_the_digest_is_salted(self) -> None:
        assert digest_secret(SALT, SECRET) != digest_secret("11" * 16, SECRET)
        assert digest_secret(SALT, SECRET) == digest_secret(SALT, SECRET.encode())


class TestNames:
    def test_names(self) -> None:
        assert name_problem("chat-ui.v2_1") is None
        for bad in ("", "-x", "a b", "x" * 65, "é"):
            assert name_problem(bad) is not None, bad
        assert "reserved" in (name_problem("api-key") or "") and "reserved" in (name_problem("anonymous") or "")


class TestRules:
    def test_models_match_any_name_or_alias(self) -> None:
        chat = Principal("chat", KeyScope(models=("team/*", "small")))
        assert check_model(chat, ["team/x:Q4"], "team/x:Q4") is None
        assert check_model(chat, ["my-alias", "other/big", "small"], "my-alias") is None, "an alias matches"
        refusal = check_model(chat, ["other/big"], "other/big")
        assert refusal is not None and refusal.status == 403 and refusal.code == "model_not_allowed"
        assert refusal.rule == "models: team/*, small" and "other/big" in refusal.message
        assert check_model(Principal("all", KeyScope()), ["anything"], "anything") is None, "no patterns: every model"
        assert check_model(FULL_PRINCIPAL, ["anything"], "anything") is None
        assert check_model(chat, ["Team/x"], "Team/x") is not None, "case-sensitive"

    def test_endpoints(self) -> None:
        chat = Principal("chat", KeyScope(endpoints=(INFERENCE,)))
        assert check_endpoint(chat, INFERENCE) is None and check_endpoint(chat, OPEN) is None
        refusal = check_endpoint(chat, ADMIN)
        assert refusal is not None and refusal.code == "endpoint_not_allowed" and refusal.rule == "endpoints: inference"
        admin_only = Principal("ops", KeyScope(endpoints=(ADMIN,)))
        assert check_endpoint(admin_only, INFERENCE) is not None and check_endpoint(admin_only, ADMIN) is None
        assert check_endpoint(FULL_PRINCIPAL, ADMIN) is None

    def test_expiry(self) -> None:
        scope = KeyScope(expires_at=T0)
        assert not expired(scope, T0 - timedelta(seconds=1)) and expired(scope, T0)
        assert not expired(KeyScope(), T0)

    def test_keep_alive_is_capped(self) -> None:
        capped = KeyScope(max_keep_alive=300)
        assert capped_keep_alive(capped, 60) == 60 and capped_keep_alive(capped, 3600) == 300
        assert capped_keep_alive(capped, -1) == 300 and capped_keep_alive(capped, None) == 300
        assert capped_keep_alive(KeyScope(), -1) == -1 and capped_keep_alive(None, 3600) == 3600


class TestRouteClasses:
    def test_the_classes(self) -> None:
        assert endpoint_class("POST", "/v1/chat/completions") == INFERENCE
        assert endpoint_class("POST", "/api/generate") == INFERENCE
        assert endpoint_class("GET", "/v1/stream/abc") == INFERENCE
        assert endpoint_class("GET", "/v1/models") == OPEN and endpoint_class("POST", "/api/show") == OPEN
        assert endpoint_class("GET", "/props") == OPEN and endpoint_class("POST", "/props") == ADMIN
        assert endpoint_class("GET", "/lora-adapters") == INFERENCE
        assert endpoint_class("POST", "/lora-adapters") == ADMIN
        assert endpoint_class("POST", "/slots/0") == ADMIN and endpoint_class("GET", "/slots") == ADMIN
        assert endpoint_class("GET", "/schema/openapi.json") == OPEN
        assert endpoint_class("GET", "/nowhere") == ADMIN, "unknown: the strictest"
