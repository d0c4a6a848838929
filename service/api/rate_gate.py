"""The rate limits' counters (issue 34): each named key's window of uses on this node, kept current
from this node's admissions and every node's ``request_completed`` (:mod:`service.core.rate_limits`
decides).

Each request counts once, wherever it was served:

- admitted here: a request at admission (the key middleware calls :meth:`RateGate.admit`); its own
  ``request_completed``, recorded here, adds only its tokens;
- recorded by another node (the live state tails the shared log): a request and its tokens;
- admitted here but forwarded to the node that serves it (which records it): the admission is
  taken back (:meth:`RateGate.forwarded`), since that node's ``request_completed`` counts it;
- recorded here without an admission here (a request another node forwarded): a request and tokens.

Which of this node's admissions a record here belongs to is not known (``request_completed`` carries
no request id), only how many are outstanding; a mix-up moves a request by its duration in the
window, never counts it twice. A request admitted but never recorded (refused by its handler: an
unknown model, a model outside the scope) still counts, as admitted.

At start-up the windows are rebuilt from the log's ``request_completed`` of the last window
(:meth:`RateGate.attach`), so a kill -9 and restart forgets nothing already recorded. Between nodes
the counts differ only by requests in flight and the tail's delay (well under a second).
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable
from datetime import UTC, datetime

from service.core import events as ev
from service.core.keys import INFERENCE, RESERVED_NAMES, Principal, Refusal, endpoint_class
from service.core.rate_limits import WINDOW_S, Use, decide_counted, limited
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.live_state import LiveState
from service.event_store.statements import EventFilter

_PAGE = 1000


def _tokens(e: ev.RequestCompleted) -> int:
    return (e.prompt_tokens or 0) + (e.completion_tokens or 0)


class _Window:
    """One key's uses, oldest first, with their sums kept as entries come and go, so that admitting
    costs the same however busy the key is (a sum per request was 0.2 ms at 1000 uses)."""

    __slots__ = ("requests", "tokens", "uses")

    def __init__(self) -> None:
        self.uses: deque[Use] = deque()
        self.requests = 0
        self.tokens = 0

    def prune(self, start: float) -> None:
        while self.uses and self.uses[0].at <= start:
            gone = self.uses.popleft()
            self.requests -= gone.requests
            self.tokens -= gone.tokens

    def add(self, use: Use) -> None:
        # Another node's record may be a little older than the newest entry (its clock, the tail's
        # delay): found from the right, almost always at once.
        at = len(self.uses)
        while at and self.uses[at - 1].at > use.at:
            at -= 1
        self.uses.insert(at, use)
        self.requests += use.requests
        self.tokens += use.tokens

    def retract(self) -> None:
        """Take the newest admission back (its request, not its tokens)."""
        for i in range(len(self.uses) - 1, -1, -1):
            use = self.uses[i]
            if use.requests:
                self.uses[i] = Use(use.at, 0, use.tokens)
                self.requests -= use.requests
                return


class RateGate:
    """Admit or refuse a named key's request; learn the rest from the log."""

    def __init__(self, node: str | None, window: float = WINDOW_S, clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.window = window
        self.clock = clock
        self._windows: defaultdict[str, _Window] = defaultdict(_Window)
        self._outstanding: defaultdict[str, int] = defaultdict(int)  # admitted here, not yet recorded here

    def _window(self, key: str, now: float) -> _Window:
        window = self._windows[key]
        window.prune(now - self.window)
        return window

    def admit(self, principal: Principal) -> Refusal | None:
        """Called by the key middleware for each inference request: None (counted) or the 429."""
        if not limited(principal.scope):
            return None
        now = self.clock()
        w = self._window(principal.name, now)
        refusal = decide_counted(principal.scope, w.uses, w.requests, w.tokens, now, self.window)
        if refusal is None:
            w.add(Use(now, 1, 0))
            self._outstanding[principal.name] += 1
        return refusal

    def admit_request(self, principal: Principal, method: str, path: str) -> Refusal | None:
        """:meth:`admit` for the inference routes of every dialect; other routes pass uncounted."""
        return self.admit(principal) if endpoint_class(method, path) == INFERENCE else None

    def forwarded(self, key: str) -> None:
        """A request admitted here was served (and recorded) by another node: take one admission back."""
        if self._outstanding[key] <= 0:
            return
        self._outstanding[key] -= 1
        self._windows[key].retract()

    def _add(self, key: str, at: float, requests: int, tokens: int) -> None:
        now = self.clock()
        if at > now - self.window and (requests or tokens):
            self._window(key, now).add(Use(at, requests, tokens))

    def on_folded(self, recorded: ev.Recorded, _state: RouterState) -> None:
        """The LiveState listener: another node's request counts whole, one admitted here only its tokens."""
        e = recorded.event
        if not isinstance(e, ev.RequestCompleted) or e.key is None or e.key in RESERVED_NAMES:
            return
        requests = 1
        if recorded.source.get("node") == self.node and self._outstanding[e.key] > 0:
            self._outstanding[e.key] -= 1
            requests = 0
        self._add(e.key, recorded.recorded_at.timestamp(), requests, _tokens(e))

    async def attach(self, live: LiveState, store: AsyncEventStore) -> None:
        """Listen to the tail, then count the log's ``request_completed`` of the last window up to
        where the tail stood (none twice, none missed)."""
        live.add_listener(self.on_folded)
        upto = live.position
        since = datetime.fromtimestamp(self.clock() - self.window, UTC)
        after = 0
        while True:
            flt = EventFilter(after=after, before=upto + 1, types=("request_completed",), since=since, limit=_PAGE)
            batch = await store.read(flt)
            for recorded in batch:
                e = recorded.event
                if isinstance(e, ev.RequestCompleted) and e.key is not None and e.key not in RESERVED_NAMES:
                    self._add(e.key, recorded.recorded_at.timestamp(), 1, _tokens(e))
            if len(batch) < _PAGE:
                return
            after = batch[-1].position
