"""Scraping the router's ``GET /metrics`` in tests: the samples parsed with prometheus_client's own
parser (so every scrape also checks the text is a valid exposition), and a wait for a counter that
events feed (the tail folds them a moment after they are written)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

from devtools.service_process import ServiceProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(svc: ServiceProcess, **headers: str) -> Samples:
    answer = httpx.get(f"{svc.url}/metrics", headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_metric(
    svc: ServiceProcess,
    ok: Callable[[Samples], bool],
    what: str,
    timeout: float = 60,
    headers: Mapping[str, str] | None = None,
) -> Samples:
    """Scrape until ``ok``: counters fed by events move once the tail folds them. ``headers``: a
    service with a key wants it on the scrape too."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(svc, **(headers or {}))
        if ok(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never held; last scrape: {samples}")
        time.sleep(0.05)
