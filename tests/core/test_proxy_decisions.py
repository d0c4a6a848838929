"""The proxy's decisions: the hop a request takes, who records it, what a failed one is told.

Given events (with the node that wrote them), when the proxy decides, then this. No fixtures: the
fold of a short log.
"""

from __future__ import annotations

import signal

from service.core import events as ev
from service.core.proxy_decisions import (
    plain_http,
    pooled_hop,
    records_completion,
    unresponsive_failure,
    worker_failure,
)
from service.core.state import UNRESPONSIVE
from tests.core.examples import example
from tests.core.test_liveness import HUNG, M, state_of
from tests.core.test_placement import GiB, held, joined, ready, world


class TestTheHop:
    def test_a_model_another_node_serves_goes_through_the_pooled_node_client(self) -> None:
        assert pooled_hop("b", "http://b:8080/v1/chat/completions")

    def test_a_node_over_tls_goes_through_httpx(self) -> None:
        assert not pooled_hop("b", "https://b.example:8443/v1/chat/completions")
        assert not plain_http("https://b.example:8443/") and plain_http("http://10.0.0.2:8080/")

    def test_a_local_worker_goes_through_httpx(self) -> None:
        assert not pooled_hop(None, "http://127.0.0.1:9000/v1/chat/completions")


class TestWhoRecordsTheRequest:
    def test_this_node_records_a_request_its_own_worker_served(self) -> None:
        state = world(joined("a", 8 * GiB), held("m", "a"), ready("m", "a"))
        assert records_completion(state.models["m"].instance, "i-m", "a")

    def test_a_request_forwarded_to_another_node_is_that_nodes_to_record(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "b"), ready("m", "b"))
        assert not records_completion(state.models["m"].instance, "i-m", "a")

    def test_a_service_without_nodes_records_every_request(self) -> None:
        state = world(held("m"), ready("m"))
        assert records_completion(state.models["m"].instance, "i-m", None)

    def test_an_instance_that_ended_or_was_replaced_is_recorded_here(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "b"), ready("m", "b"))
        assert records_completion(None, "i-m", "a"), "ended: nobody else will"
        assert records_completion(state.models["m"].instance, "i-old", "a"), "another instance now"


class TestAFailureExplained:
    def test_a_worker_that_crashed_is_explained_by_its_crash(self) -> None:
        crash = ev.InstanceCrashed(instance_id="i-m", signal=signal.SIGSEGV, stderr_tail="x\n", requests_in_flight=1)
        state = world(held("m"), ready("m"), [(crash, "m", None)])
        failure = worker_failure(state, "m", None, "RemoteProtocolError")
        assert failure.code == "model_failed" and failure.extra["signal"] == "SIGSEGV"
        assert "SIGSEGV" in failure.message and "RemoteProtocolError" not in failure.message

    def test_a_lost_serving_node_is_named_with_who_recorded_it(self) -> None:
        lost = ev.NodeLost(node="b", incarnation="b-1", detected_by="a")
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "b"), ready("m", "b"), [(lost, None, "a")])
        failure = worker_failure(state, "m", "b", "ReadError")
        assert failure.extra == {"model": "m", "node": "b", "reason": "node_lost"}
        assert failure.message == "node 'b', which served model 'm', was lost (recorded by 'a')"

    def test_otherwise_the_transport_error_is_named_for_the_worker(self) -> None:
        state = world(held("m"), ready("m"))
        failure = worker_failure(state, "m", None, "ReadError")
        assert failure.message == "the worker of model 'm' stopped answering: ReadError"
        assert failure.extra == {"model": "m"}

    def test_or_for_the_node_that_served_it(self) -> None:
        failure = worker_failure(None, "m", "b", "ReadTimeout")
        assert failure.message == "node 'b' serving model 'm' stopped answering: ReadTimeout"

    def test_a_timeout_not_waited_for_is_named_as_such(self) -> None:
        assert worker_failure(None, "m", None, "ReadTimeout").message.endswith("stopped answering: ReadTimeout")


class TestAHungWorker:
    def test_a_worker_given_up_as_hung_is_told_with_the_recorded_reason(self) -> None:
        hung = unresponsive_failure(state_of(*HUNG).models[M], M)
        assert hung.code == "model_failed" and hung.extra["reason"] == UNRESPONSIVE
        assert "stopped responding" in hung.message and hung.extra["hint"]

    def test_one_whose_failure_another_replaced_still_says_it_stopped_responding(self) -> None:
        stopped = ev.InstanceStopped(instance_id="i1", reason=UNRESPONSIVE)
        reload = (
            example(ev.InstanceRequested, instance_id="i2"),
            ev.InstanceLoadFailed(instance_id="i2", message="bad"),
        )
        reloaded = state_of(*HUNG, stopped, *reload)
        assert reloaded.models[M].last_error is not None and reloaded.models[M].last_error.reason != UNRESPONSIVE
        for found in (reloaded.models[M], None):
            hung = unresponsive_failure(found, M)
            assert hung.message == f"the worker of model {M!r} stopped responding"
            assert hung.extra == {"model": M, "reason": UNRESPONSIVE}
