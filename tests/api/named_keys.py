"""Helpers of the named keys' tests (issue 34): a service with a full key, and keys made through
``POST /keys`` as a client makes them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from devtools.service_process import ServiceProcess

FULL = "sk-full-key-0123456789abcdef"
"""The service's ``--api-key``."""


def full_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {FULL}"}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def add_key(
    svc: ServiceProcess, name: str, models: Sequence[str] = (), endpoints: Sequence[str] = ("inference",), **more: Any
) -> str:
    """A new named key's secret (``POST /keys`` with the full key)."""
    body = {"name": name, "models": list(models), "endpoints": list(endpoints), **more}
    answer = httpx.post(f"{svc.url}/keys", json=body, headers=full_headers(), timeout=30)
    assert answer.status_code == 200, answer.text
    secret: str = answer.json()["secret"]
    assert secret.startswith("mr-") and answer.json()["key"]["name"] == name
    return secret


def call(svc: ServiceProcess, method: str, path: str, secret: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, f"{svc.url}{path}", headers=bearer(secret), timeout=120, **kwargs)
