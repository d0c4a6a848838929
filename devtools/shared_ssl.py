"""One SSL context per set of arguments for every httpx client of a process.

httpx builds a new SSL context for every client, and so for every module-level call
(``httpx.get(...)``): loading certifi's CA bundle costs ~50 ms of CPU each time. The
test suite polls plain-http services on 127.0.0.1 thousands of times (a service's
start alone polls ``/health`` every 50 ms), so on 2 cores the polling took a core from
the very processes it waited for. An ``SSLContext`` is safe to share between
connections and threads; only its creation is cached, with the same arguments.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from typing import Any

__all__ = ["share_ssl_contexts"]


def share_ssl_contexts() -> None:
    """Make httpx reuse the SSL context it made for the same arguments (idempotent)."""
    from httpx._transports import default  # where clients look the function up

    namespace = vars(default)
    made: Callable[..., ssl.SSLContext] = namespace["create_ssl_context"]
    if made in _INSTALLED:
        return
    cached = functools.lru_cache(maxsize=32)(made)

    def create_ssl_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        try:
            return cached(*args, **kwargs)
        except TypeError:  # an unhashable argument: made afresh, as before
            return made(*args, **kwargs)

    _INSTALLED.append(create_ssl_context)
    namespace["create_ssl_context"] = create_ssl_context


_INSTALLED: list[Callable[..., ssl.SSLContext]] = []
