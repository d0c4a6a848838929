"""Per-model series of the router's ``GET /metrics`` (issue 34; llama.cpp #24851): requests by status
class, prompt and predicted tokens, and the request duration, labelled by ``model``, and by ``key``
while named keys exist; plus the requests each model is processing now.

Counted from ``request_completed`` as the tail folds it, like the router's other event counters: from
this process's start (the listener is added after the catch-up, so a restart starts every counter at
0 together; Prometheus' ``rate()`` takes it as a reset), over the whole log (a cluster's nodes share
it). The names are llama-server's (``prompt_tokens_total``, ``tokens_predicted_total``,
``requests_processing``) under the router's ``modelrouter_`` prefix: a single-model scrape carries the
worker's own ``llamacpp:*`` families too, and one family twice in a text is no valid exposition. The
prompt count is the answer's ``usage`` one, cached tokens included (llama-server's
``llamacpp:prompt_tokens_total`` leaves those out). Which labels show is
:mod:`service.core.model_series`' rule: bounded by the catalogue and the live keys.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from service.core import events as ev
from service.core.model_series import counted, keys_on, shown_key, shown_model, status_class
from service.core.state import RouterState

_PREFIX = "modelrouter"


@dataclass(slots=True)
class _Counts:
    """One series' counters: requests by status class, tokens, and the duration histogram's buckets."""

    bounds: tuple[float, ...]
    statuses: Tally[str] = field(default_factory=Tally)
    prompt: int = 0
    predicted: int = 0
    seconds: float = 0.0
    in_bucket: list[int] = field(default_factory=list)  # per bound, then +Inf; not cumulative

    def __post_init__(self) -> None:
        self.in_bucket = [0] * (len(self.bounds) + 1)

    def add(self, e: ev.RequestCompleted) -> None:
        self.statuses[status_class(e.status_code)] += 1
        self.prompt += e.prompt_tokens or 0
        self.predicted += e.completion_tokens or 0
        seconds = e.duration_ms / 1000
        self.seconds += seconds
        self.in_bucket[bisect_left(self.bounds, seconds)] += 1  # le: a value on a bound is in that bucket

    def buckets(self) -> list[tuple[str, float]]:
        cumulative, out = 0, []
        for bound, n in zip((*map(str, self.bounds), "+Inf"), self.in_bucket, strict=True):
            cumulative += n
            out.append((bound, float(cumulative)))
        return out


class ModelSeries(Collector):
    """The per-model counters (fed by :meth:`on_folded`) and their rendering at scrape time, where the
    fold says which models and keys still have series."""

    def __init__(
        self, state: Callable[[], RouterState], busy: Callable[[], Mapping[str, int]], bounds: tuple[float, ...]
    ) -> None:
        self._state = state
        self._busy = busy
        self._bounds = bounds
        self._by_model: dict[str, _Counts] = {}
        self._by_key: dict[tuple[str, str], _Counts] = {}  # (model, the caller's name as recorded)

    def on_folded(self, recorded: ev.Recorded) -> None:
        """Count a completed request; forget a removed model's series and a revoked key's."""
        e = recorded.event
        if isinstance(e, ev.RequestCompleted):
            if recorded.model and counted(e.route):
                self._by_model.setdefault(recorded.model, _Counts(self._bounds)).add(e)
                if e.key is not None:
                    self._by_key.setdefault((recorded.model, e.key), _Counts(self._bounds)).add(e)
        elif isinstance(e, ev.ModelRemoved) and recorded.model:
            self._by_model.pop(recorded.model, None)
            self._by_key = {pair: c for pair, c in self._by_key.items() if pair[0] != recorded.model}
        elif isinstance(e, ev.KeyRevoked):
            self._by_key = {pair: c for pair, c in self._by_key.items() if pair[1] != e.name}

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        # What the fold no longer holds leaves memory too, not only the text: a model a reload dropped,
        # a key whose last request ended after its revocation.
        self._by_model = {m: c for m, c in self._by_model.items() if shown_model(state, m)}
        self._by_key = {
            (model, key): c
            for (model, key), c in self._by_key.items()
            if shown_model(state, model) and shown_key(key, state.keys) is not None
        }
        if keys_on(state.keys):
            labels = ["model", "key"]
            rows = [([model, key], c) for (model, key), c in sorted(self._by_key.items())]
        else:
            labels = ["model"]
            rows = [([model], c) for model, c in sorted(self._by_model.items())]
        yield from _families(labels, rows)
        yield self._processing(state)

    def _processing(self, state: RouterState) -> GaugeMetricFamily:
        """llama-server's ``requests_processing``, per model: this node's proxied requests holding it now."""
        family = GaugeMetricFamily(
            f"{_PREFIX}_requests_processing", "Requests each model is processing now", labels=["model"]
        )
        busy = self._busy()
        for name, model in sorted(state.models.items()):
            if model.listed and (model.instance is not None or busy.get(name)):
                family.add_metric([name], busy.get(name, 0))
        return family


def _families(labels: list[str], rows: list[tuple[list[str], _Counts]]) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        f"{_PREFIX}_model_requests",
        "Requests each model answered, by status class (monitoring reads excluded)",
        labels=[*labels, "status"],
    )
    prompt = CounterMetricFamily(
        f"{_PREFIX}_prompt_tokens",
        "Prompt tokens of each model's answers, as their usage counts them (cached tokens included)",
        labels=labels,
    )
    predicted = CounterMetricFamily(
        f"{_PREFIX}_tokens_predicted", "Tokens each model generated, as its answers' usage counts them", labels=labels
    )
    duration = HistogramMetricFamily(
        f"{_PREFIX}_model_request_duration_seconds",
        "Request time per model, queue wait and streaming included",
        labels=labels,
    )
    for values, c in rows:
        for status, n in sorted(c.statuses.items()):
            requests.add_metric([*values, status], n)
        prompt.add_metric(values, c.prompt)
        predicted.add_metric(values, c.predicted)
        duration.add_metric(values, c.buckets(), c.seconds)
    yield requests
    yield prompt
    yield predicted
    yield duration
