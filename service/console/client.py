"""The CLI's HTTP client: one place that turns every failure into one line.

``MODELROUTER_URL`` (default ``http://127.0.0.1:8080``) names the service and
``MODELROUTER_API_KEY``, when set, is sent as ``Authorization: Bearer``. A
problem+json answer becomes :class:`CliError` with its ``detail`` and code; a
refused connection says how to start the service.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from service.event_store.codec import WireEvent

DEFAULT_URL = "http://127.0.0.1:8080"
# Control calls answer at once; chat and streams have no overall deadline.
_TIMEOUT = httpx.Timeout(30.0, read=None)

Query = Mapping[str, str | int | float | list[str] | None]
"""A GET's query parameters (``GET /events``' filters): a None value is left out."""
Body = Mapping[str, object]
"""A request body, sent as JSON."""


class CliError(Exception):
    """A failure to print as one line (``modelrouter <cmd>: error: ...``), then its ``hint`` if any; exit ``code``."""

    def __init__(self, message: str, *, code: int = 1, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint


def without_hint(message: str, hint: object) -> str:
    """The message without its trailing ``Hint: …`` sentence (the CLI prints the hint on its own line)."""
    return message.removesuffix(f" Hint: {hint}").removesuffix(f". Hint: {hint}") if hint else message


def problem_error(answer: httpx.Response) -> CliError:
    """A problem+json answer as a :class:`CliError`, its ``hint`` member kept apart from the message."""
    try:
        body = answer.json()
    except ValueError:
        body = None
    hint = body.get("hint") if isinstance(body, dict) else None
    if not isinstance(hint, str) or not isinstance(body, dict) or "detail" not in body:
        return CliError(problem_message(answer))
    code = str(body.get("type", "")).rsplit("/", 1)[-1]
    detail = without_hint(str(body["detail"]), hint)
    return CliError(f"{detail} ({code})" if code else detail, hint=hint)


def problem_message(answer: httpx.Response) -> str:
    """``detail (code)`` of a problem+json answer, else the status line and some body."""
    try:
        body = answer.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        code = str(body.get("type", "")).rsplit("/", 1)[-1]
        return f"{body['detail']} ({code})" if code else str(body["detail"])
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", body["error"]))
    return f"HTTP {answer.status_code}: {answer.text[:200].strip()}"


class Client:
    """Synchronous calls to one modelrouter service."""

    def __init__(self, url: str, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=_TIMEOUT)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Client:
        return cls(environ.get("MODELROUTER_URL") or DEFAULT_URL, environ.get("MODELROUTER_API_KEY") or None)

    def close(self) -> None:
        self._http.close()

    def _unreachable(self) -> CliError:
        return CliError(f"cannot reach modelrouter at {self.url}: is `modelrouter serve` running?")

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of a 2xx; a :class:`CliError` otherwise."""
        try:
            answer = self._http.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise self._unreachable() from None
        except httpx.HTTPError as exc:
            raise CliError(f"{method} {path} failed: {exc}") from None
        if answer.status_code >= 400:
            raise problem_error(answer)
        return answer.json()

    def head(self) -> int:
        """The log's head position: where a stream must start to miss nothing that follows.
        Read from ``/health``, which answers 503 (with the same body) while degraded."""
        try:
            answer = self._http.get("/health")
        except httpx.ConnectError:
            raise self._unreachable() from None
        except httpx.HTTPError as exc:
            raise CliError(f"GET /health failed: {exc}") from None
        try:
            return int(answer.json()["tail"]["head"])
        except (ValueError, KeyError, TypeError):
            raise CliError(problem_message(answer)) from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Body) -> Any:
        return self.request("POST", path, json=dict(body))

    @contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[Iterator[tuple[str, str, str]]]:
        """Server-sent events as ``(event, id, data)``; errors as :class:`CliError`."""
        try:
            with self._http.stream(method, path, **kwargs) as answer:
                if answer.status_code >= 400:
                    answer.read()
                    raise problem_error(answer)
                yield sse_events(answer.iter_lines())
        except httpx.ConnectError:
            raise self._unreachable() from None
        except httpx.HTTPError as exc:
            raise CliError(f"{method} {path} failed: {exc}") from None

    @contextmanager
    def events(self, params: Query) -> Iterator[Iterator[WireEvent]]:
        """``GET /events/stream`` with ``params``: each event's JSON (see docs/api.md)."""
        with self.stream("GET", "/events/stream", params=dict(params)) as raw:
            yield (json.loads(data) for _event, _id, data in raw if data)


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str, str]]:
    """Parse ``text/event-stream`` lines (comments and ``retry:`` skipped)."""
    event, event_id = "message", ""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, event_id, "\n".join(data)
            event, data = "message", []
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
        elif field == "id":
            event_id = value
