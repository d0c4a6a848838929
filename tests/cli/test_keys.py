"""``modelrouter keys add|list|revoke`` (issue 34) against a real service with a full key: ``add``
prints the secret once, and it opens the service; ``list`` shows the scope, never the secret;
``revoke`` closes it; a named key may not manage keys."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from devtools.service_process import ServiceProcess
from tests.api.named_keys import FULL, bearer
from tests.cli.conftest import cli


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with ServiceProcess(tmp_path_factory.mktemp("keys-home"), args=["--api-key", FULL]) as proc:
        yield proc


@pytest.mark.timeout(120)
def test_keys_add_list_revoke(keyed: ServiceProcess) -> None:
    added = cli(
        keyed, "keys", "add", "editor", "--models", "team/*,small", "--rpm", "30", "--expires", "30d",
        "--max-keep-alive", "5m", MODELROUTER_API_KEY=FULL,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip().splitlines()[-1]
    assert secret.startswith("mr-") and "shown this once" in added.stdout
    assert httpx.get(f"{keyed.url}/v1/models", headers=bearer(secret), timeout=30).status_code == 200

    listed = cli(keyed, "keys", "list", MODELROUTER_API_KEY=FULL)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("editor"))
    assert "team/*, small" in row and "30" in row and "300" in row and "inference" in row
    assert secret not in listed.stdout and secret[:15] in row, "the prefix tells keys apart, the secret stays"

    refused = cli(keyed, "keys", "list", MODELROUTER_API_KEY=secret)
    assert refused.returncode != 0 and "endpoints: inference" in refused.stderr

    revoked = cli(keyed, "keys", "revoke", "editor", MODELROUTER_API_KEY=FULL)
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert httpx.get(f"{keyed.url}/v1/models", headers=bearer(secret), timeout=30).status_code == 401
    again = cli(keyed, "keys", "revoke", "editor", MODELROUTER_API_KEY=FULL)
    assert again.returncode != 0 and "no key named 'editor'" in again.stderr


@pytest.mark.timeout(60)
def test_keys_add_refuses_a_bad_duration(keyed: ServiceProcess) -> None:
    bad = cli(keyed, "keys", "add", "x", "--max-keep-alive", "soon", MODELROUTER_API_KEY=FULL)
    assert bad.returncode == 2 and "not a duration" in bad.stderr
