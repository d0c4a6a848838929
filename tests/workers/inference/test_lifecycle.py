"""The inference worker's lifecycle table: every edge it allows, every other pair refused,
and the diagram in docs/architecture.md drawn from it."""

from __future__ import annotations

import itertools
from typing import get_args

import pytest

from service.core.transitions import mermaid
from tests.workers.conftest import REPO_ROOT
from workers.inference import WORKER_LIFECYCLE, Trigger, WorkerState, next_state

L, R, F, S = WorkerState.LOADING, WorkerState.READY, WorkerState.FAILED, WorkerState.STOPPING
ALLOWED = {(L, "loaded"): R, (L, "load_failed"): F, (L, "stop"): S, (R, "stop"): S, (F, "stop"): S}


@pytest.mark.parametrize(("before", "trigger", "after"), [(b, t, a) for (b, t), a in ALLOWED.items()])
def test_each_allowed_edge(before: WorkerState, trigger: Trigger, after: WorkerState) -> None:
    assert next_state(before, trigger) is after


def test_every_other_pair_is_refused() -> None:
    refused = [(b, t) for b, t in itertools.product(WorkerState, get_args(Trigger)) if (b, t) not in ALLOWED]
    assert len(refused) == len(WorkerState) * len(get_args(Trigger)) - len(ALLOWED)
    assert {(b, t): next_state(b, t) for b, t in refused} == dict.fromkeys(refused)


def test_a_load_that_ends_during_a_stop_changes_nothing() -> None:
    """The two races the table settles: the stop came first, so neither end of the load is recorded."""
    assert next_state(S, "loaded") is None and next_state(S, "load_failed") is None
    assert next_state(R, "loaded") is None  # and a model is never loaded twice


def test_health_reports_the_values() -> None:
    assert [s.value for s in WorkerState] == ["loading", "ready", "failed", "stopping"]


def test_docs_show_the_diagram_generated_from_the_table() -> None:
    doc = (REPO_ROOT / "docs" / "architecture.md").read_text()
    assert mermaid(WORKER_LIFECYCLE) in doc, "regenerate the inference worker diagram in docs/architecture.md"
