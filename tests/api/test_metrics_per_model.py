"""The per-model series of ``GET /metrics`` (issue 34) from the events the real fold folds: one
``model`` label per catalogued model, a ``key`` label while named keys exist, a removed model's and
a revoked key's series gone. Real events through :func:`service.core.fold.fold`, no service (the
service's own test, with real workers and clients, is ``tests/api/test_metrics_models.py``)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

from prometheus_client.parser import text_string_to_metric_families

from service.api.metrics import Gauges, RouterMetrics
from service.core import events as ev
from service.core.fold import fold
from service.core.key_commands import ScopeRequest, decide_create, decide_revoke
from service.core.keys import FULL
from service.core.state import RouterState
from service.event_store.live_state import TailHealth
from tests.core.examples import example

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class _Log:
    """The fold and the metrics listener, fed as LiveState feeds them."""

    def __init__(self) -> None:
        self.state = RouterState()
        self.busy: dict[str, int] = {}
        self.metrics = RouterMetrics(lambda: self.state, Gauges(lambda: 0, lambda: 0, busy=lambda: self.busy))
        self._positions = count(1)

    def append(self, event: ev.Event, model: str | None = None) -> None:
        position = next(self._positions)
        recorded = ev.Recorded(position, f"e{position}", model, event, {}, datetime.now(UTC))
        self.state = fold(self.state, recorded)
        self.metrics.on_folded(recorded, self.state)

    def discover(self, *models: str) -> None:
        for model in models:
            self.append(example(ev.ModelDiscovered, path=f"/m/{model}.gguf"), model)

    def completed(self, model: str, key: str | None, status: int = 200, **fields: object) -> None:
        values: dict[str, object] = {"route": "/v1/chat/completions", "duration_ms": 30.0, **fields}
        self.append(ev.RequestCompleted(instance_id="i", status_code=status, key=key, **values), model)  # type: ignore[arg-type]

    def key(self, name: str) -> None:
        event = decide_create(
            self.state, name, ScopeRequest(), key_id=f"{len(self.state.keys):012x}", salt="s", digest="d"
        )
        self.append(event)

    def scrape(self) -> Samples:
        text = self.metrics.render(TailHealth(True, 0, 0, 0.0, 0, None)).decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _models(samples: Samples, name: str) -> set[str]:
    return {dict(labels).get("model", "") for series, labels in samples if series == name}


def test_each_model_has_its_requests_tokens_and_durations() -> None:
    log = _Log()
    log.discover("a", "b")
    log.completed("a", FULL, prompt_tokens=7, completion_tokens=3, duration_ms=20.0)
    log.completed("a", FULL, prompt_tokens=5, completion_tokens=None, duration_ms=2000.0)
    log.completed("a", FULL, status=404)
    log.completed("b", FULL, prompt_tokens=11, completion_tokens=0)
    log.completed("b", FULL, route="/metrics")  # a monitoring read: no request of the model
    samples = log.scrape()
    assert _value(samples, "modelrouter_model_requests_total", model="a", status="2xx") == 2
    assert _value(samples, "modelrouter_model_requests_total", model="a", status="4xx") == 1
    assert _value(samples, "modelrouter_model_requests_total", model="b", status="2xx") == 1
    assert _value(samples, "modelrouter_prompt_tokens_total", model="a") == 12
    assert _value(samples, "modelrouter_tokens_predicted_total", model="a") == 3
    assert _value(samples, "modelrouter_prompt_tokens_total", model="b") == 11
    assert _value(samples, "modelrouter_model_request_duration_seconds_count", model="a") == 3
    assert _value(samples, "modelrouter_model_request_duration_seconds_sum", model="a") == 2.05
    assert _value(samples, "modelrouter_model_request_duration_seconds_bucket", model="a", le="0.025") == 1
    assert _value(samples, "modelrouter_model_request_duration_seconds_bucket", model="a", le="1.0") == 2
    assert _value(samples, "modelrouter_model_request_duration_seconds_bucket", model="a", le="+Inf") == 3
    assert not any("key" in dict(labels) for _, labels in samples), "no named key: no key label"


def test_a_removed_model_drops_out_and_a_new_one_starts_at_zero() -> None:
    log = _Log()
    log.discover("a", "b")
    log.completed("a", FULL, prompt_tokens=4)
    log.completed("b", FULL, prompt_tokens=4)
    assert _models(log.scrape(), "modelrouter_prompt_tokens_total") == {"a", "b"}
    log.append(ev.ModelRemoved(files=()), "b")
    samples = log.scrape()
    assert _models(samples, "modelrouter_prompt_tokens_total") == {"a"}
    assert _models(samples, "modelrouter_model_request_duration_seconds_count") == {"a"}
    log.discover("b")  # back in the catalogue: its series start again
    log.completed("b", FULL, prompt_tokens=1)
    assert _value(log.scrape(), "modelrouter_prompt_tokens_total", model="b") == 1


def test_named_keys_label_each_caller_and_a_revoked_key_drops_out() -> None:
    log = _Log()
    log.discover("a")
    log.completed("a", FULL, prompt_tokens=1)  # before any named key: counted per model only
    log.key("alice")
    log.key("bob")
    log.completed("a", "alice", prompt_tokens=10, completion_tokens=2)
    log.completed("a", "alice", prompt_tokens=10, completion_tokens=2)
    log.completed("a", "bob", status=503)
    log.completed("a", None, prompt_tokens=99)  # a node writing the log before issue 34: no key of its own
    samples = log.scrape()
    assert _value(samples, "modelrouter_prompt_tokens_total", model="a", key="alice") == 20
    assert _value(samples, "modelrouter_tokens_predicted_total", model="a", key="alice") == 4
    assert _value(samples, "modelrouter_model_requests_total", model="a", key="bob", status="5xx") == 1
    assert _value(samples, "modelrouter_prompt_tokens_total", model="a", key=FULL) == 1
    assert _value(samples, "modelrouter_prompt_tokens_total", model="a") is None, "one label set per family"
    log.append(decide_revoke(log.state, "bob"))
    log.completed("a", "bob", prompt_tokens=3)  # started before the revocation, ended after it
    samples = log.scrape()
    keys = {dict(labels).get("key") for name, labels in samples if name == "modelrouter_prompt_tokens_total"}
    assert keys == {"alice", FULL}
    log.append(decide_revoke(log.state, "alice"))
    samples = log.scrape()  # no named key left: per model again, with every request since the start
    assert _value(samples, "modelrouter_prompt_tokens_total", model="a") == 1 + 20 + 99 + 3
    assert _value(samples, "modelrouter_model_requests_total", model="a", status="2xx") == 5


def test_requests_processing_is_per_loaded_model() -> None:
    log = _Log()
    log.discover("a", "b")
    log.busy["a"] = 2
    samples = log.scrape()
    assert _value(samples, "modelrouter_requests_processing", model="a") == 2
    assert _value(samples, "modelrouter_requests_processing", model="b") is None, "neither loaded nor busy"
