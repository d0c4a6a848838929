"""The service's HTTP client for its hops: plain HTTP to the workers, TLS only when a peer asks for it.

The workers listen on loopback over plain HTTP; only another node's ``--advertise-url`` may be
``https://``. httpx builds a verified TLS context for every client it makes, loading the CA bundle
(~30 ms of an empty log's ~0.9 s start on a 2-core VM, ``bench/recovery.py``), so the verified
transport is made on the first ``https://`` request instead: a service without TLS peers never
pays for it.
"""

from __future__ import annotations

import httpx

__all__ = ["hop_client"]


class _TlsOnFirstUse(httpx.AsyncBaseTransport):
    """httpx's default (verified) transport, made when the first ``https://`` request is sent."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._transport: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._transport is None:
            self._transport = httpx.AsyncHTTPTransport(limits=self._limits)
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()


def hop_client(timeout: httpx.Timeout, limits: httpx.Limits, auth: httpx.Auth | None = None) -> httpx.AsyncClient:
    """An ``AsyncClient`` whose ``http://`` transport carries no TLS context and whose ``https://`` one
    is httpx's default, verified as always, made on first use; ``auth`` signs every request it sends
    (the workers' secrets: :mod:`service.supervision.worker_keys`)."""
    plain = httpx.AsyncHTTPTransport(limits=limits, verify=False)  # never used for TLS: https:// is mounted
    tls = _TlsOnFirstUse(limits)
    return httpx.AsyncClient(timeout=timeout, transport=plain, mounts={"https://": tls}, auth=auth)
