"""``modelrouter usage``: the real command over a real service's own requests."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from devtools.service_process import ServiceProcess
from tests.cli.conftest import cli
from tests.eventually import eventually


def _row(stdout: str, group: str) -> list[str]:
    return next(line.split() for line in stdout.splitlines() if line.split()[:1] == [group])


def test_usage_table_sums_the_requests(svc: ServiceProcess, tiny_repo: str) -> None:
    """Two chats: the table's row for the caller (anonymous, no key configured) and the total count
    both requests and the tokens the answers stated; by day, today's row; filters and errors."""
    model = f"{tiny_repo}:Q4_K_M"
    assert cli(svc, "pull", model).returncode == 0
    prompt = completion = 0
    for text in ("hello", "how are you today"):
        body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
        answer = httpx.post(f"{svc.url}/v1/chat/completions", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        prompt += answer.json()["usage"]["prompt_tokens"]
        completion += answer.json()["usage"]["completion_tokens"]

    def both_recorded() -> bool:  # recorded off the answer's path: soon after it
        usage = httpx.get(f"{svc.url}/usage", params={"model": model}, timeout=10).json()
        return bool(usage["total"]["requests"] == 2)

    eventually(both_recorded, "both requests in GET /usage", timeout=30, interval=0.05)
    shown = cli(svc, "usage", "--group-by", "key", "--model", model)
    assert shown.returncode == 0, shown.stderr
    row = _row(shown.stdout, "anonymous")
    assert row[1:5] == ["2", str(prompt), str(completion), "0"]
    assert row[6] in ("ms", "s")  # p50: "18 ms"

    by_day = cli(svc, "usage", "--group-by", "day", "--model", model, "--since", "24h")
    assert by_day.returncode == 0, by_day.stderr
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert _row(by_day.stdout, today)[1:4] == ["2", str(prompt), str(completion)]
    assert _row(by_day.stdout, "total")[1] == "2"

    assert cli(svc, "usage", "--model", "org/nothing-GGUF").stdout.strip() == "no requests"
    bad = cli(svc, "usage", "--since", "yesterday")
    assert bad.returncode != 0
    assert "since" in bad.stderr and "Traceback" not in bad.stderr
