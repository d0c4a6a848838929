"""The secrets of this service's inference workers, and the one place that sends them.

Each worker gets a fresh secret when it is spawned (:meth:`WorkerKeys.issue`, in its environment:
:mod:`service.core.worker_key`) and refuses every request without it. The service reaches its workers
through httpx clients, and each of them carries :class:`WorkerKeys` as its ``auth``: httpx asks it to
sign every request, and it adds the secret when the request goes to one of this service's workers, by
the endpoint the worker reported (``instance_loading``). No call site adds the header itself, so none
can forget it; a request to anything else (another node's service, a TLS peer) leaves without it.
Its cost: one dict lookup by the URL's (host, port) inside httpx's auth flow, about 3 µs a request
on a busy 2-core VM, against the ~1 ms the proxy adds (docs/benchmarks.md, `bench/proxy.py`).
"""

from __future__ import annotations

import secrets
from collections.abc import Generator

import httpx

from service.core import events as ev
from service.core import worker_key
from service.core.event_base import Recorded
from service.core.state import RouterState

__all__ = ["WorkerKeys"]

_Address = tuple[str, int]  # (host, port): how a request's URL and a worker's endpoint are compared


def _address(url: httpx.URL) -> _Address:
    return url.host, url.port or (443 if url.scheme == "https" else 80)


class WorkerKeys(httpx.Auth):
    """The secret of each live worker of this service, by instance id and by the address it listens on."""

    def __init__(self) -> None:
        self._by_instance: dict[str, str] = {}  # instance id -> its secret
        self._by_address: dict[_Address, str] = {}  # where it listens -> instance id
        self._address_of: dict[str, _Address] = {}

    def __repr__(self) -> str:
        return f"WorkerKeys({len(self._by_instance)} workers)"  # never the secrets

    def issue(self, instance_id: str) -> dict[str, str]:
        """A new secret for the worker about to be spawned for ``instance_id``: the environment to add."""
        key = secrets.token_urlsafe(32)
        self._by_instance[instance_id] = key
        return {worker_key.ENV: key}

    def forget(self, instance_id: str) -> None:
        """The worker is gone: its secret and its address go, unless a newer worker of ours took the port
        (a reaped worker's exit can be handled after its successor reported the same port)."""
        self._by_instance.pop(instance_id, None)
        address = self._address_of.pop(instance_id, None)
        if address is not None and self._by_address.get(address) == instance_id:
            del self._by_address[address]

    def on_event(self, recorded: Recorded, _state: RouterState) -> None:
        """A live-state listener: a worker of ours that reports its endpoint is reached there."""
        event = recorded.event
        if isinstance(event, ev.InstanceLoading | ev.InstanceReady) and event.instance_id in self._by_instance:
            address = _address(httpx.URL(event.endpoint))
            self._address_of[event.instance_id] = address
            self._by_address[address] = event.instance_id

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """httpx's hook, for every request of a client made with ``auth=``: the secret, when it goes to a worker."""
        instance_id = self._by_address.get(_address(request.url))
        key = self._by_instance.get(instance_id) if instance_id is not None else None
        if key is not None:
            request.headers[worker_key.HEADER] = key
        yield request
