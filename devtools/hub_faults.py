"""Fault injection and byte accounting for the fake Hub.

Faults are plain JSON objects (so another process can set them through
``POST /_control/faults``); this module turns them into a per-response plan.
Why counted faults: a resume test wants "drop once at 40%" and then a normal
answer for the resumed request, so each fault carries ``times`` (None = every
matching response) and is used up as responses match it.

Fault fields (all optional except ``kind``)::

    kind          drop | stall | status | corrupt | throttle
    repo, path    limit to one repo / one file path (default: any)
    target        resolve (default) | info | tree | refs | api | any
    methods       HTTP methods it applies to (default GET; status: GET and HEAD)
    at_fraction   trigger at this fraction of the file size (absolute position)
    at_offset     trigger at this absolute byte offset of the file
    after_bytes   trigger after this many body bytes of the response
    times         how many matching responses it applies to (default 1; throttle: None)
    seconds       stall length (default 3600: "forever" for tests that cancel)
    status        status code for kind=status (default 500)
    error_code    X-Error-Code for kind=status (e.g. EntryNotFound, GatedRepo)
    rate          bytes/second for kind=throttle
    reset         drop with a TCP RST instead of a FIN (default False)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("drop", "stall", "status", "corrupt", "throttle")
TARGETS = ("resolve", "info", "tree", "refs", "api", "any")
_BODY_KINDS = ("drop", "stall", "corrupt", "throttle")


@dataclass(slots=True)
class Fault:
    """One armed fault; ``remaining`` None means unlimited."""

    kind: str
    repo: str | None = None
    path: str | None = None
    target: str = "resolve"
    methods: tuple[str, ...] = ("GET",)
    at_fraction: float | None = None
    at_offset: int | None = None
    after_bytes: int | None = None
    remaining: int | None = 1
    seconds: float = 3600.0
    status: int = 500
    error_code: str | None = None
    rate: float | None = None
    reset: bool = False
    hits: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fault:
        kind = data.get("kind")
        if kind not in KINDS:
            raise ValueError(f"fault kind must be one of {KINDS}, got {kind!r}")
        target = data.get("target", "resolve")
        if target not in TARGETS:
            raise ValueError(f"fault target must be one of {TARGETS}, got {target!r}")
        default_methods = ("GET", "HEAD") if kind == "status" else ("GET",)
        default_times = None if kind == "throttle" else 1
        if kind == "throttle" and not data.get("rate"):
            raise ValueError("throttle needs a positive 'rate' in bytes/second")
        return cls(
            kind=kind,
            repo=data.get("repo"),
            path=data.get("path"),
            target=target,
            methods=tuple(m.upper() for m in data.get("methods", default_methods)),
            at_fraction=data.get("at_fraction"),
            at_offset=data.get("at_offset"),
            after_bytes=data.get("after_bytes"),
            remaining=data.get("times", default_times),
            seconds=float(data.get("seconds", 3600.0)),
            status=int(data.get("status", 500)),
            error_code=data.get("error_code"),
            rate=data.get("rate"),
            reset=bool(data.get("reset", False)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "repo": self.repo,
            "path": self.path,
            "target": self.target,
            "methods": list(self.methods),
            "at_fraction": self.at_fraction,
            "at_offset": self.at_offset,
            "after_bytes": self.after_bytes,
            "times": self.remaining,
            "seconds": self.seconds,
            "status": self.status,
            "error_code": self.error_code,
            "rate": self.rate,
            "reset": self.reset,
            "hits": self.hits,
        }

    def matches(self, target: str, method: str, repo: str | None, path: str | None) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        if method not in self.methods:
            return False
        if self.target != "any" and not (self.target == target or (self.target == "api" and target != "resolve")):
            return False
        if self.repo is not None and self.repo != repo:
            return False
        return self.path is None or self.path == path

    def trigger(self, start: int, size: int) -> int | None:
        """Body bytes into a response starting at file offset ``start`` after which
        the fault fires; None when the trigger point lies before ``start``."""
        if self.after_bytes is not None:
            return max(0, int(self.after_bytes))
        if self.at_offset is not None:
            point = int(self.at_offset)
        elif self.at_fraction is not None:
            point = int(size * float(self.at_fraction))
        else:
            return 0
        return point - start if point >= start else None


@dataclass(slots=True)
class BodyPlan:
    """What to do to one response body: cut points are body-relative byte counts."""

    drop_at: int | None = None
    drop_reset: bool = False
    stalls: list[tuple[int, float]] = field(default_factory=list)
    corrupt_at: int | None = None
    rate: float | None = None

    def next_event(self, sent: int) -> int | None:
        """The nearest body offset > ``sent`` (or == for drop/stall at sent) where something happens."""
        points = [p for p, _ in self.stalls if p >= sent]
        if self.drop_at is not None and self.drop_at >= sent:
            points.append(self.drop_at)
        if self.corrupt_at is not None and self.corrupt_at >= sent:
            points.append(self.corrupt_at)
        return min(points) if points else None


class FaultBook:
    """Thread-safe fault list plus per-file byte counters (shared by handler threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._bytes: dict[str, int] = {}
        self._gets: dict[str, int] = {}
        self._requests: list[dict[str, Any]] = []

    def set_faults(self, faults: list[Mapping[str, Any]], *, replace: bool = True) -> None:
        parsed = [Fault.from_json(f) for f in faults]
        with self._lock:
            self._faults = parsed if replace else self._faults + parsed

    def faults(self) -> list[dict[str, Any]]:
        with self._lock:
            return [f.to_json() for f in self._faults]

    def take_status(self, target: str, method: str, repo: str | None, path: str | None) -> Fault | None:
        """Consume and return the first matching ``status`` fault, if any."""
        with self._lock:
            for f in self._faults:
                if f.kind == "status" and f.matches(target, method, repo, path):
                    _use(f)
                    return f
        return None

    def take_body_plan(self, repo: str, path: str, method: str, start: int, size: int) -> BodyPlan:
        """Consume the body faults that apply to a download response of ``path``."""
        plan = BodyPlan()
        with self._lock:
            for f in self._faults:
                if f.kind not in _BODY_KINDS or not f.matches("resolve", method, repo, path):
                    continue
                if f.kind == "throttle":
                    plan.rate = min(plan.rate or float("inf"), float(f.rate or 0)) or None
                    _use(f)
                    continue
                point = f.trigger(start, size)
                if point is None:
                    continue  # the trigger point is behind this (resumed) response: not used up
                if f.kind == "drop" and (plan.drop_at is None or point < plan.drop_at):
                    plan.drop_at, plan.drop_reset = point, f.reset
                elif f.kind == "stall":
                    plan.stalls.append((point, f.seconds))
                elif f.kind == "corrupt" and plan.corrupt_at is None:
                    plan.corrupt_at = point
                _use(f)
        return plan

    def record_request(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._requests.append(entry)
            del self._requests[:-1000]  # bounded: a benchmark must not grow memory without end
            if entry.get("method") == "GET" and entry.get("file"):
                self._gets[entry["file"]] = self._gets.get(entry["file"], 0) + 1

    def add_bytes(self, key: str, n: int) -> None:
        if n:
            with self._lock:
                self._bytes[key] = self._bytes.get(key, 0) + n

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "bytes_served": dict(self._bytes),
                "total_bytes_served": sum(self._bytes.values()),
                "get_requests": dict(self._gets),
                "requests": list(self._requests),
                "faults": [f.to_json() for f in self._faults],
            }

    def reset_stats(self) -> None:
        with self._lock:
            self._bytes.clear()
            self._gets.clear()
            self._requests.clear()

    def reset(self) -> None:
        with self._lock:
            self._faults.clear()
        self.reset_stats()


def _use(fault: Fault) -> None:
    fault.hits += 1
    if fault.remaining is not None:
        fault.remaining -= 1
