"""Placement: where (and whether) a model runs, by count and by memory, on one node and on many.

Given events (with the node that wrote them), when the planner decides, then
these starts, evictions and refusals. No fixtures: the fold of a short log.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from service.core import cluster, placement, scheduling
from service.core import download_lifecycle as downloads
from service.core import events as ev
from service.core import instance_decisions as decide
from service.core.contracts import DownloadSpec, SpecFile
from service.core.demand_queue import Demanded, Queue, edit
from service.core.errors import CommandRejected
from service.core.fold import replay
from service.core.placement import NodeBudget
from service.core.scheduling import Demand, SlotFacts, plan_slots
from service.core.state import RouterState
from tests.core.examples import example
from tests.core.test_lifecycles import T0

GiB = 1024**3
Entry = tuple[ev.Event, str | None, str | None]  # event, model, node that wrote it


def recorded(*entries: Entry, after: RouterState | None = None) -> list[ev.Recorded]:
    """Recorded events one second apart, positioned after ``after``'s last one."""
    out = []
    first = 1 if after is None else after.position + 1
    for i, (event, model, node) in enumerate(entries, start=first):
        source = {"kind": "router", "node": node} if node else {"kind": "router"}
        out.append(ev.Recorded(i, f"e{i}", model, event, source, T0 + timedelta(seconds=i)))
    return out


def held(name: str, node: str | None = None, *, layers: int = 4, pinned: bool = False) -> list[Entry]:
    """``name`` on disk (on ``node``), measured: ``layers`` makes its KV cache, hence its need, grow."""
    files = ({"path": f"/m/{name}.gguf", "size": GiB},)
    shape = example(
        ev.ModelMeasured,
        path=f"/m/{name}.gguf",
        weights_bytes=GiB,
        n_layer=layers,
        n_head_kv=8,
        n_embd_head_k=128,
        n_embd_head_v=128,
        n_ctx_train=8192,
    )
    out: list[Entry] = [
        (ev.ModelDiscovered(source="models_dir", path=f"/m/{name}.gguf", files=files, size=GiB), name, node),
        (shape, name, node),
    ]
    if pinned:
        out.append((ev.ModelConfigured(pinned=True), name, node))
    return out


def ready(name: str, node: str | None = None) -> list[Entry]:
    iid = f"i-{name}"
    return [
        (example(ev.InstanceRequested, instance_id=iid, node=node), name, node),
        (example(ev.InstanceLoading, instance_id=iid), name, node),
        (example(ev.InstanceReady, instance_id=iid, endpoint=f"http://worker-{name}"), name, node),
    ]


def joined(node: str, memory: int, models_max: int = 4) -> list[Entry]:
    event = example(
        ev.NodeJoined,
        node=node,
        incarnation=f"{node}-1",
        url=f"http://{node}:8080",
        memory_bytes=memory,
        models_max=models_max,
    )
    return [(event, None, node)]


def world(*groups: list[Entry]) -> RouterState:
    return replay(recorded(*(e for group in groups for e in group)))


def need(state: RouterState, name: str) -> int:
    return placement.model_need(state.models[name])


def one_node(memory: int | None, models_max: int = 4, busy: dict[str, int] | None = None) -> SlotFacts:
    return SlotFacts(models_max=models_max, busy=busy or {}, nodes=(NodeBudget(None, models_max, memory),))


class TestOneNodeByMemory:
    def test_a_model_that_fits_the_free_memory_starts(self) -> None:
        state = world(held("a"), held("b"), ready("a"))
        plan = plan_slots(state, [Demand("b")], one_node(need(state, "a") + need(state, "b")))
        assert [d.model for d in plan.start] == ["b"] and plan.evict == ()

    def test_a_free_slot_is_not_enough_when_memory_is_short_the_lru_model_is_evicted(self) -> None:
        state = world(held("a"), held("b"), held("c"), ready("a"), ready("b"))
        memory = need(state, "a") + need(state, "b")  # full: two slots of four used
        plan = plan_slots(state, [Demand("c")], one_node(memory))
        assert plan.start == () and plan.evict == ("a",)  # a is the least recently used

    def test_only_as_many_models_are_evicted_as_the_need_takes_oldest_first(self) -> None:
        state = world(held("a"), held("b"), held("c"), held("big", layers=64), ready("a"), ready("b"), ready("c"))
        memory = need(state, "a") + need(state, "big")  # one small one evicted is not enough, two are
        plan = plan_slots(state, [Demand("big")], one_node(memory))
        assert plan.evict == ("a", "b")  # ...two are, and the newest stays

    def test_a_pinned_model_is_never_evicted_the_next_oldest_goes(self) -> None:
        state = world(held("a", pinned=True), held("b"), held("c"), ready("a"), ready("b"))
        plan = plan_slots(state, [Demand("c")], one_node(need(state, "a") + need(state, "b")))
        assert plan.evict == ("b",)

    def test_a_busy_model_is_not_evicted_the_demand_waits_in_order(self) -> None:
        state = world(held("a"), held("b"), held("c"), ready("a"))
        facts = one_node(need(state, "a"), busy={"a": 1})
        assert plan_slots(state, [Demand("b"), Demand("c")], facts) == plan_slots(state, [], facts)

    def test_a_model_not_measured_yet_is_placed_by_count_alone(self) -> None:
        state = world(held("a"), ready("a"))
        found = ev.ModelDiscovered(
            source="models_dir", path="/m/x.gguf", files=({"path": "/m/x.gguf", "size": 1},), size=1
        )
        state = replay(recorded((found, "x", None), after=state), state)
        assert placement.model_need(state.models["x"]) == 0
        plan = plan_slots(state, [Demand("x")], one_node(need(state, "a")))
        assert [d.model for d in plan.start] == ["x"]


class TestRefusedAtOnce:
    def _facts(self, memory: int) -> decide.Facts:
        limits = decide.Limits(models_max=4, queue_timeout=60, max_queued_requests=0, load_timeout=300)
        return decide.Facts(limits=limits, now=T0, mono=0.0, memory=memory)

    def test_a_load_that_cannot_fit_even_after_evicting_everything_is_refused_naming_need_and_free(self) -> None:
        state = world(held("a", pinned=True), held("big", layers=64), ready("a"))
        memory = need(state, "a") + need(state, "big") - 1  # fits only if the pinned model went
        with pytest.raises(CommandRejected) as refused:
            decide.decide_load(state, Queue(), "big", "load", self._facts(memory), _fresh())
        assert refused.value.code == "insufficient_memory"
        assert refused.value.extra["need_bytes"] == need(state, "big")
        assert refused.value.extra["free_bytes"] == memory - need(state, "a")
        assert str(need(state, "big")) in refused.value.message

    def test_a_request_is_refused_the_same_way_instead_of_waiting(self) -> None:
        state = world(held("big", layers=64))
        with pytest.raises(CommandRejected, match="needs") as refused:
            decide.decide_acquire(
                state, Queue(), "big", autoload=True, mine=None, facts=self._facts(need(state, "big") - 1), deadline=60
            )
        assert refused.value.code == "insufficient_memory"

    def test_one_that_fits_after_evicting_unpinned_models_is_not_refused(self) -> None:
        state = world(held("a"), held("b"), ready("a"))
        made = decide.decide_load(state, Queue(), "b", "load", self._facts(need(state, "b")), _fresh())
        stops = [a.event for a in made.events if isinstance(a.event, ev.InstanceStopRequested)]
        assert [s.instance_id for s in stops] == ["i-a"]


def _fresh() -> decide.Drawn:
    """Ids and ports drawn before a decision, as the supervisor draws them."""
    return decide.Drawn(ids=("i-new",) * 4, ports=(9999,) * 4)


class TestManyNodes:
    def _facts(self, node: str, memory: int) -> decide.Facts:
        limits = decide.Limits(models_max=4, queue_timeout=60, max_queued_requests=0, load_timeout=300)
        return decide.Facts(limits=limits, now=T0, mono=0.0, node=node, memory=memory)

    def test_a_model_only_another_node_holds_is_requested_on_that_node_without_a_local_spawn(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "b"))
        queue = edit(Queue(), Demanded("m", "autoload", 0.0, waiter=True, autoload=True))
        made = decide.decide_plan(state, queue, self._facts("a", 8 * GiB), _fresh())
        requested = [a.event for a in made.events if isinstance(a.event, ev.InstanceRequested)]
        assert [(r.node, r.port) for r in requested] == [("b", 0)]  # b picks its own port
        assert not any(isinstance(e, decide.Spawn) for e in made.effects)  # b's supervisor spawns it

    def test_the_node_that_holds_the_files_comes_first_even_with_less_free_memory(self) -> None:
        state = world(joined("a", 64 * GiB), joined("b", 8 * GiB), held("m", "b"))
        plan = plan_slots(state, [Demand("m")], _cluster_facts(state, "a", 64 * GiB))
        assert plan.where == {"m": "b"}

    def test_among_holders_one_that_fits_beats_one_that_must_evict(self) -> None:
        state = world(
            joined("a", 8 * GiB), joined("b", 8 * GiB), held("x", "a"), held("m", "a"), held("m", "b"), ready("x", "a")
        )
        tight = need(state, "x") + need(state, "m") - 1
        plan = plan_slots(state, [Demand("m")], _cluster_facts(state, "a", tight))
        assert plan.where == {"m": "b"} and plan.evict == ()

    def test_a_lost_node_is_not_used_and_its_instances_are_closed_once(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "a"), held("m", "b"), ready("m", "b"))
        closing = cluster.on_node_lost(state, "b", "b-1", detected_by="a")
        assert [(type(c.event).__name__, c.event_id) for c in closing] == [
            ("NodeLost", "node_lost:b-1"),
            ("InstanceLost", "instance_lost:i-m"),
        ]
        state = replay(recorded(*[(c.event, c.model, "a") for c in closing], after=state), state)
        assert state.nodes["b"].lost and state.models["m"].instance is None
        assert cluster.on_node_lost(state, "b", "b-1", detected_by="a") == []  # told once
        plan = plan_slots(state, [Demand("m")], _cluster_facts(state, "a", 8 * GiB))
        assert plan.where == {"m": "a"}

    def test_a_lost_nodes_download_is_interrupted_under_an_id_that_fits_the_log(self) -> None:
        """The log's ``event_id`` is 36 characters (a UUID; PostgreSQL refuses longer, and a refused
        ``node_lost`` batch left the node unrecorded); a job id is a UUID already."""
        job = "0f0e0d0c-0b0a-4908-8706-050403020100"
        requested = example(ev.DownloadRequested, job_id=job)
        state = world(
            joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "b"), ready("m", "b"), [(requested, "org/r:Q4", "b")]
        )
        closing = cluster.on_node_lost(state, "b", "b-1", detected_by="a")
        kinds = [type(c.event).__name__ for c in closing]
        assert kinds == ["NodeLost", "InstanceLost", "DownloadInterrupted"]
        assert all(len(c.event_id) <= 36 for c in closing), [c.event_id for c in closing]
        other = cluster.on_node_lost(state, "b", "b-1", detected_by="c")
        assert [c.event_id for c in other] == [c.event_id for c in closing], "any node: the same ids"
        state = replay(recorded(*[(c.event, c.model, "a") for c in closing], after=state), state)
        assert state.job(job) is not None and state.job(job).status.value == "interrupted"

    def test_a_node_lost_in_its_current_incarnation_is_unreachable_its_forwarded_requests_cut(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB))
        stale = recorded((ev.NodeLost(node="b", incarnation="b-0", detected_by="a"), None, "a"), after=state)
        state = replay(stale, state)
        assert cluster.unreachable(state, stale[0]) is None, "an older incarnation's loss"
        lost = recorded((ev.NodeLost(node="b", incarnation="b-1", detected_by="a"), None, "a"), after=state)
        state = replay(lost, state)
        found = cluster.unreachable(state, lost[0])
        assert found is not None and (found.name, found.url) == ("b", "http://b:8080")
        left = recorded((cluster.on_leaving("a", "a-1").event, None, "a"), after=state)
        assert cluster.unreachable(replay(left, state), left[0]) is None, "a clean stop closes its own sockets"

    def test_a_node_that_left_is_not_used_not_watched_and_never_recorded_lost(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "a"), held("m", "b"))
        leaving = cluster.on_leaving("b", "b-1")
        assert leaving.event_id == "node_left:b-1"
        state = replay(recorded((leaving.event, None, "b"), after=state), state)
        assert state.nodes["b"].left and not state.nodes["b"].lost and state.nodes["b"].left_at is not None
        assert cluster.alive(state) == ["a"] and cluster.lost_to_check(state, "a") == []
        assert cluster.on_node_lost(state, "b", "b-1", detected_by="a") == [], "left, not lost"
        late = ev.NodeLost(node="b", incarnation="b-1", detected_by="a")  # a watcher that had not folded it yet
        assert replay(recorded((late, None, "a"), after=state), state).nodes["b"] == state.nodes["b"]
        plan = plan_slots(state, [Demand("m")], _cluster_facts(state, "a", 8 * GiB))
        assert plan.where == {"m": "a"}
        again = example(ev.NodeJoined, node="b", incarnation="b-2", url="http://b:8080", memory_bytes=8 * GiB)
        state = replay(recorded((again, None, "b"), after=state), state)
        assert not state.nodes["b"].gone and cluster.alive(state) == ["a", "b"], "a new incarnation is up"

    def test_a_lost_incarnation_does_not_become_left(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB))
        lost = ev.NodeLost(node="b", incarnation="b-1", detected_by="a")
        left = cluster.on_leaving("b", "b-1").event
        state = replay(recorded((lost, None, "a"), (left, None, "b"), after=state), state)
        assert state.nodes["b"].lost and not state.nodes["b"].left

    def test_a_node_recorded_lost_finds_itself_lost_and_the_workers_whose_instances_ended(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "b"), held("n", "b"), ready("m", "b"))
        assert not cluster.recorded_lost(state, "b", "b-1")
        running = {"i-m": "m", "i-old": "n"}  # i-old: a worker whose instance had already ended
        assert cluster.ended(state, running) == ["i-old"]
        closing = cluster.on_node_lost(state, "b", "b-1", detected_by="a")
        state = replay(recorded(*[(c.event, c.model, "a") for c in closing], after=state), state)
        assert cluster.recorded_lost(state, "b", "b-1") and not cluster.recorded_lost(state, "b", "b-0")
        assert cluster.ended(state, running) == ["i-m", "i-old"]

    def test_two_nodes_deciding_on_the_same_state_request_one_instance(self) -> None:
        """The second decision is taken again on the state after the first (LiveState.decide):
        the model then has an instance, and nothing more is requested anywhere."""
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "a"), held("m", "b"))
        queue = edit(Queue(), Demanded("m", "autoload", 0.0, waiter=True, autoload=True))
        first = decide.decide_plan(state, queue, self._facts("a", 8 * GiB), _fresh())
        state = replay(recorded(*[(a.event, a.model, "a") for a in first.events], after=state), state)
        second = decide.decide_plan(state, queue, self._facts("b", 8 * GiB), _fresh())
        assert len(first.events) == 1 and second.events == ()

    def test_each_node_sees_only_its_own_instances_and_files(self) -> None:
        state = world(joined("a", 8 * GiB), joined("b", 8 * GiB), held("m", "a"), held("n", "b"), ready("n", "b"))
        mine = cluster.own_view(state, "a")
        assert mine.models["n"].instance is None and not mine.models["n"].available
        assert mine.models["m"].available and mine.models["m"].path == "/m/m.gguf"
        assert cluster.own_view(state, None) is state


def on_the_hub(name: str) -> list[Entry]:
    """``name`` as an ``hf-repo`` preset lists it on every node: no node holds its files yet."""
    return [(ev.ModelConfigured(hf_repo=f"org/{name}-GGUF:Q8_0"), name, "a")]


def spec(size: int) -> DownloadSpec:
    file = SpecFile(path="m-Q8_0.gguf", size=size, sha256="0" * 64)
    return DownloadSpec("org/m-GGUF", "main", "c" * 40, "Q8_0", "http://hub", (file,))


class TestDownloadsWhereTheModelWillRun:
    """A model no live node holds is downloaded by the node that will serve it, chosen as its load
    would be; the decision is an event (``download_requested`` with ``node``) that node acts on."""

    def _facts(self, node: str, memory: int, models_max: int = 4) -> decide.Facts:
        limits = decide.Limits(models_max=models_max, queue_timeout=60, max_queued_requests=0, load_timeout=300)
        return decide.Facts(limits=limits, now=T0, mono=0.0, node=node, memory=memory)

    def _where(self, state: RouterState, size: int, facts: decide.Facts) -> str | None:
        return scheduling.download_node(state, "m", size, decide.slot_facts(state, facts))

    def test_the_node_with_the_most_free_memory_downloads_it_whoever_was_asked(self) -> None:
        state = world(joined("a", 4 * GiB), joined("b", 8 * GiB), on_the_hub("m"))
        assert self._where(state, GiB, self._facts("a", 4 * GiB)) == "b"
        assert self._where(state, GiB, self._facts("b", 8 * GiB)) == "b"

    def test_a_node_with_a_free_slot_beats_one_that_must_evict_whatever_its_memory(self) -> None:
        state = world(
            joined("a", 64 * GiB, models_max=1), joined("b", 8 * GiB), held("x", "a"), ready("x", "a"), on_the_hub("m")
        )
        assert self._where(state, GiB, self._facts("a", 64 * GiB, models_max=1)) == "b"

    def test_a_node_too_small_for_its_files_is_passed_over_even_for_one_that_must_evict(self) -> None:
        state = world(
            joined("a", 4 * GiB), joined("b", 8 * GiB, models_max=1), held("x", "b"), ready("x", "b"), on_the_hub("m")
        )
        assert self._where(state, GiB, self._facts("a", 4 * GiB)) == "a", "fits beats evicts"
        assert self._where(state, 6 * GiB, self._facts("a", 4 * GiB)) == "b", "6 GiB never fit a"

    def test_alone_or_when_a_live_node_holds_it_nobody_is_named(self) -> None:
        state = world(joined("a", 4 * GiB), joined("b", 8 * GiB), on_the_hub("m"), held("m", "a"))
        assert self._where(state, GiB, self._facts("a", 4 * GiB)) is None
        single = world(on_the_hub("m"))
        facts = decide.Facts(limits=self._facts("a", 0).limits, now=T0, mono=0.0)
        assert self._where(single, GiB, facts) is None

    def test_the_job_belongs_to_the_node_named_which_alone_starts_it_and_is_interrupted_if_it_is_lost(self) -> None:
        state = world(joined("a", 4 * GiB), joined("b", 8 * GiB), on_the_hub("m"))
        job = "0f0e0d0c-0b0a-4908-8706-050403020100"
        made = downloads.request_download(state, "m", job, spec(GiB), node="b")
        requested = made.events[0].event
        assert isinstance(requested, ev.DownloadRequested) and requested.node == "b"
        state = replay(recorded((requested, "m", "a"), after=state), state)  # written by a, for b
        assert state.job(job) is not None and state.job(job).node == "b"
        assert downloads.waiting_to_start(state, set(), 0, "a") == []
        assert [j.job_id for j in downloads.waiting_to_start(state, set(), 0, "b")] == [job]
        assert cluster.own_view(state, "a").models["m"].active_job is None
        assert cluster.own_view(state, "b").models["m"].active_job == job
        closing = cluster.on_node_lost(state, "b", "b-1", detected_by="a")
        assert [type(c.event).__name__ for c in closing] == ["NodeLost", "DownloadInterrupted"]

    def test_a_model_only_a_lost_node_holds_is_downloaded_again_on_a_node_that_is_up(self) -> None:
        state = world(joined("a", 4 * GiB), joined("b", 8 * GiB), on_the_hub("m"), held("m", "b"))
        assert not scheduling.needs_files(state.models["m"], state)
        lost = ev.NodeLost(node="b", incarnation="b-1", detected_by="a")
        state = replay(recorded((lost, None, "a"), after=state), state)
        assert state.models["m"].available and scheduling.needs_files(state.models["m"], state)
        assert decide.decide_fetch(state, "m", None).effects == (decide.FetchFiles("m", None),)
        assert self._where(state, GiB, self._facts("a", 4 * GiB)) is None, "a, alone up, fetches it"
        assert not downloads.request_download(state, "m", "j", spec(GiB)).answer.already_downloaded

    def test_a_cancel_asked_of_another_node_leaves_the_end_to_the_node_running_the_job(self) -> None:
        state = world(joined("a", 4 * GiB), joined("b", 8 * GiB), on_the_hub("m"))
        job = "0f0e0d0c-0b0a-4908-8706-050403020100"
        requested = downloads.request_download(state, "m", job, spec(GiB), node="b").events[0].event
        state = replay(recorded((requested, "m", "a"), after=state), state)
        asked = downloads.cancel(state, job, discard=False, has_worker=False, bytes_on_disk=0, node="a")
        assert [type(e).__name__ for e in asked] == ["DownloadCancelRequested"], "b's worker records the end"
        there = downloads.cancel(state, job, discard=False, has_worker=False, bytes_on_disk=0, node="b")
        assert [type(e).__name__ for e in there] == ["DownloadCancelRequested", "DownloadCancelled"]
        lost = ev.NodeLost(node="b", incarnation="b-1", detected_by="a")
        gone = replay(recorded((lost, None, "a"), after=state), state)
        assert not downloads.runs_elsewhere(gone, gone.job(job), "a"), "a lost node ends nothing"

    def test_a_job_written_without_a_node_is_the_writers(self) -> None:
        state = world(joined("a", 4 * GiB), on_the_hub("m"))
        requested = downloads.request_download(state, "m", "j", spec(GiB)).events[0].event
        assert isinstance(requested, ev.DownloadRequested) and requested.node is None
        state = replay(recorded((requested, "m", "a"), after=state), state)
        assert state.job("j") is not None and state.job("j").node == "a"


def _cluster_facts(state: RouterState, node: str, memory: int) -> SlotFacts:
    budgets = cluster.budgets(state, node, NodeBudget(node, 4, memory))
    return SlotFacts(models_max=4, busy={}, nodes=budgets)


class TestHoldersInTheFold:
    def test_a_model_removed_on_one_node_stays_available_with_the_other_nodes_copy(self) -> None:
        state = world(held("m", "a"), held("m", "b"))
        assert set(state.models["m"].holders) == {"a", "b"}
        state = replay(recorded((ev.ModelRemoved(files=("/m/m.gguf",)), "m", "b"), after=state), state)
        assert set(state.models["m"].holders) == {"a"} and state.models["m"].available

    def test_without_nodes_nothing_is_recorded_per_node(self) -> None:
        state = world(held("m"))
        assert state.models["m"].holders == {} and state.models["m"].available
