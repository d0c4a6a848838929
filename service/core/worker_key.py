"""The lock on an inference worker's port: who may talk to it (docs/security.md, "The workers' ports").

The service makes a secret for each worker it spawns and hands it over in the worker's environment
(:data:`ENV`), never on its command line, which every local user can read (``ps``,
``/proc/PID/cmdline``). The worker takes it out of its environment at once, so nothing it starts
inherits it, and answers only requests that carry it in :data:`HEADER`; the service's HTTP clients
add it to every request bound for one of its workers (:mod:`service.supervision.worker_keys`).
"""

from __future__ import annotations

import hmac
from collections.abc import MutableMapping

__all__ = ["ENV", "HEADER", "OPEN_WARNING", "refusal", "take"]

ENV = "MODELROUTER_WORKER_KEY"
"""The environment variable that carries a worker's secret from the service to the worker."""
HEADER = "X-Modelrouter-Worker-Key"
"""The request header that carries it back on every request from the service to the worker."""
OPEN_WARNING = (
    f"this worker was started without {ENV}: its port answers ANY local process, with no key. "
    "The service always sets one; run a worker without it only by hand, for debugging"
)
"""What a worker started without a secret says at start (it then answers everyone, as before issue 34)."""


def take(environ: MutableMapping[str, str]) -> str | None:
    """The worker's secret, removed from ``environ`` (so the worker's own children never inherit it);
    None when it was not given (a worker started by hand)."""
    key = environ.pop(ENV, None)
    return key or None


def refusal(expected: str | None, given: str | None) -> str | None:
    """Why a request with ``given`` (the :data:`HEADER` it carried, or None) is refused by a worker whose
    secret is ``expected``; None: it may pass. Compared in constant time, so the answer's timing says
    nothing about how much of a guess was right. The message never quotes what was sent."""
    if expected is None:
        return None  # an open worker (OPEN_WARNING)
    if given is None:
        return f"this worker answers only the modelrouter service that started it: the request has no {HEADER}"
    # Headers arrive as latin-1 text: encoding back to latin-1 gives the bytes sent, whatever they were.
    if not hmac.compare_digest(expected.encode("latin-1", "replace"), given.encode("latin-1", "replace")):
        return f"this worker answers only the modelrouter service that started it: wrong {HEADER}"
    return None
