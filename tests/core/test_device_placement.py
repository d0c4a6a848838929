"""Placement over given device inventories: each GPU judged on its own, evictions on the GPU that is
short, fewer layers under ``--fit``, and the 507 that names a GPU.

Given a node's ``node_devices_measured`` and its models (the fold of a short log), when placement
decides, then these starts, evictions, layers and refusals. No GPU needed: the inventories are given.
"""

from __future__ import annotations

import pytest

from service.core import events as ev
from service.core import instance_decisions as decide
from service.core import placement
from service.core.demand_queue import Queue
from service.core.device_memory import assign_layers, split_need, weight_parts
from service.core.device_placement import Footprint, footprint, node_gpus
from service.core.devices import HOST, MIB, Device, DeviceUse, Offload
from service.core.errors import CommandRejected
from service.core.event_base import JSON, FileRef
from service.core.fold import replay
from service.core.launch import InferenceLaunch
from service.core.placement import NodeBudget, Verdict
from service.core.scheduling import Demand, SlotFacts, plan_slots
from service.core.state import RouterState
from tests.core.examples import example
from tests.core.shapes import LLAMA_8B_WEIGHTS, llama_8b, llama_8b_fields
from tests.core.test_lifecycles import T0
from tests.core.test_placement import Entry, ready, recorded

GiB = 1024**3
WEIGHTS = LLAMA_8B_WEIGHTS
CPU = Device("CPU", "host", "cpu", "CPU", 64 * GiB, 60 * GiB)


def gpu(name: str, free_gib: float, total_gib: float = 24) -> Device:
    return Device(name, f"GPU {name}", "gpu", "CUDA", int(total_gib * GiB), int(free_gib * GiB))


def shape(name: str) -> ev.ModelMeasured:
    return example(ev.ModelMeasured, **llama_8b_fields(path=f"/m/{name}.gguf"))


SHAPE = llama_8b(path="/m/x.gguf")


def model(name: str, *, pinned: bool = False, **params: JSON) -> list[Entry]:
    files = (FileRef(f"/m/{name}.gguf", WEIGHTS),)
    return [
        (ev.ModelDiscovered(source="models_dir", path=f"/m/{name}.gguf", files=files, size=WEIGHTS), name, None),
        (shape(name), name, None),
        (ev.ModelConfigured(params=dict(params), pinned=pinned), name, None),
    ]


def devices(*found: Device) -> list[Entry]:
    measured = ev.NodeDevicesMeasured(devices=tuple(d.to_json() for d in (CPU, *found)), gpu_offload=True)
    return [(measured, None, None)]


def world(*groups: list[Entry]) -> RouterState:
    return replay(recorded(*(e for group in groups for e in group)))


def node(state: RouterState, memory: int | None = None) -> SlotFacts:
    """The service's one node as budgets are built: its GPUs from the fold's ``node_devices_measured``."""
    return SlotFacts(models_max=4, busy={}, nodes=(NodeBudget(None, 4, memory, devices=node_gpus(state, None)),))


def on_gpus(state: RouterState, name: str) -> Footprint:
    facts = node(state)
    return footprint(state.models[name], facts.nodes[0].devices)


class TestTheNeedByDevice:
    def test_without_offload_the_host_part_is_the_whole_estimate(self) -> None:
        """No GPU (or ``-ngl 0``): one part, the host's, exactly the estimate placement always used."""
        from service.core.memory import estimate

        total = estimate(SHAPE, InferenceLaunch()).total
        assert split_need(SHAPE, InferenceLaunch(), (CPU,)) == split_need(
            SHAPE, InferenceLaunch(), (gpu("CUDA0", 20),), 0
        )
        (host,) = split_need(SHAPE, InferenceLaunch(), (CPU,))
        assert host.device == HOST and host.total_bytes == total

    def test_every_layer_offloaded_leaves_the_token_embeddings_and_a_batch_on_the_host(self) -> None:
        cuda, host = split_need(SHAPE, InferenceLaunch(), (CPU, gpu("CUDA0", 20)))
        parts = weight_parts(SHAPE)
        assert cuda.device == "CUDA0" and cuda.model_bytes == 32 * parts.layer + parts.output
        assert host.model_bytes == parts.embeddings and host.kv_bytes == 0  # the KV cache follows its layers
        assert cuda.kv_bytes == 4096 * 32 * 8 * 256 * 2  # f16 keys and values, one pool of 4096 cells

    def test_measured_tensors_split_exactly_and_a_tied_output_stays_on_the_host_with_its_logits(self) -> None:
        """Gemma 3 270M Q4_K_M's header: 170 MiB of embeddings the output shares, 65.16 MiB of layers.
        On Vulkan0 (llvmpipe), llama.cpp put 65.16 MiB of weights on the device and 170 MiB with the
        514.5 MiB logits buffer on the host (docs/cluster.md): the estimate says the same."""
        from service.core.memory import compute_phases

        gemma = llama_8b(
            weights_bytes=253_113_024,
            n_layer=18,
            n_embd=640,
            n_head_kv=1,
            n_embd_head_k=256,
            n_embd_head_v=256,
            n_vocab=262_144,
            n_ctx_train=32_768,
            sliding_window=512,
            swa_layers=15,
            embedding_bytes=178_257_920,
            output_bytes=0,
            layers_bytes=68_327_424,
        )
        launch = InferenceLaunch(flash_attn="off")
        vulkan, host = split_need(
            gemma, launch, (CPU, Device("Vulkan0", "llvmpipe", "gpu", "Vulkan", 2 << 30, 2 << 30))
        )
        attention, logits = compute_phases(gemma, launch)
        assert vulkan.model_bytes == 68_327_424 and host.model_bytes == 253_113_024 - 68_327_424
        assert vulkan.compute_bytes == attention and host.compute_bytes >= logits > attention
        untied = llama_8b(**{**llama_8b_fields(), "embedding_bytes": 10, "output_bytes": 20, "layers_bytes": 3200})
        cuda, _ = split_need(untied, InferenceLaunch(), (CPU, gpu("CUDA0", 20)))
        assert cuda.model_bytes == 3200 + 20, "an output of its own is offloaded with the last layer"

    def test_no_kv_offload_keeps_the_cache_in_ram(self) -> None:
        cuda, host = split_need(SHAPE, InferenceLaunch(kv_offload=False), (CPU, gpu("CUDA0", 20)))
        assert cuda.kv_bytes == 0 and host.kv_bytes == 4096 * 32 * 8 * 256 * 2

    def test_ts_3_1_gives_each_gpu_a_run_of_layers_in_proportion_the_output_to_the_last(self) -> None:
        """llama.cpp's split of ``n_layer + 1`` layers: layer ``il`` to the first device whose share
        passes ``il / 33``: 25 to CUDA0, 7 and the output layer to CUDA1."""
        assert assign_layers(32, 33, (0.75, 0.25)) == ((25, False), (7, True))
        first, second, _ = split_need(SHAPE, InferenceLaunch(tensor_split="3,1"), (gpu("CUDA0", 20), gpu("CUDA1", 20)))
        parts = weight_parts(SHAPE)
        assert (first.model_bytes, second.model_bytes) == (25 * parts.layer, 7 * parts.layer + parts.output)
        assert first.kv_bytes == 3 * second.kv_bytes + first.kv_bytes // 25 * 4  # 25 and 7 layers' cells

    def test_without_ts_the_split_follows_each_gpus_free_memory(self) -> None:
        """18 and 6 GiB free split as ``-ts 3,1`` does; equal shares give the first GPU layers 0-16."""
        assert assign_layers(32, 33, (0.5, 0.5)) == ((17, False), (15, True))
        uneven = (gpu("CUDA0", 18), gpu("CUDA1", 6))
        by_free = split_need(SHAPE, InferenceLaunch(), uneven)
        assert by_free == split_need(SHAPE, InferenceLaunch(tensor_split="3,1"), uneven)

    def test_sm_none_puts_everything_on_main_gpu_and_sm_row_keeps_the_kv_cache_there(self) -> None:
        two = (gpu("CUDA0", 20), gpu("CUDA1", 20))
        (only, _) = split_need(SHAPE, InferenceLaunch(split_mode="none", main_gpu=1), two)
        assert only.device == "CUDA1"
        first, second, _ = split_need(SHAPE, InferenceLaunch(split_mode="row", tensor_split="1,1", main_gpu=0), two)
        assert first.model_bytes == second.model_bytes and second.kv_bytes == 0 and first.kv_bytes > 0


class TestOneGpu:
    def test_a_model_that_fits_the_gpu_loads_and_its_weights_are_not_counted_in_ram(self) -> None:
        """The node's RAM budget (here less than the weights) is checked against the host part only."""
        state = world(devices(gpu("CUDA0", 20)), model("a"))
        foot = on_gpus(state, "a")
        assert foot.host < WEIGHTS // 4 and foot.devices["CUDA0"] > WEIGHTS
        plan = plan_slots(state, [Demand("a")], node(state, memory=2 * GiB))
        assert [d.model for d in plan.start] == ["a"]

    def test_without_devices_placement_is_unchanged(self) -> None:
        state = world(model("a"))
        assert node_gpus(state, None) == ()
        assert on_gpus(state, "a") == Footprint(placement.model_need(state.models["a"]))
        assert plan_slots(state, [Demand("a")], node(state, memory=2 * GiB)).start == ()  # the whole need in RAM

    def test_a_load_that_does_not_fit_the_gpu_evicts_the_lru_model_there(self) -> None:
        """ "a" fills most of the GPU, "b" (four layers) the rest: "c" evicts "a", the least recently used."""
        gpus = devices(gpu("CUDA0", 8))
        state = world(gpus, model("a"), model("b", n_gpu_layers="4"), model("c"), ready("a"), ready("b"))
        plan = plan_slots(state, [Demand("c")], node(state))
        assert plan.evict == ("a",) and plan.start == ()

    def test_a_running_model_counts_what_its_worker_reported_on_the_gpu(self) -> None:
        state = world(devices(gpu("CUDA0", 8)), model("a"), model("c"))
        small = (DeviceUse("CUDA0", model_bytes=2 * GiB),)  # less than the estimate: the real figure wins
        offload = Offload("auto", 33, 33, 33, ("CUDA0",), small)
        ready_a: list[Entry] = [
            (example(ev.InstanceRequested, instance_id="i-a"), "a", None),
            (example(ev.InstanceLoading, instance_id="i-a"), "a", None),
            (example(ev.InstanceReady, instance_id="i-a", endpoint="http://a", offload=offload.to_json()), "a", None),
        ]
        state = replay(recorded(*ready_a, after=state), state)
        tally = placement.loads(state, node(state).nodes)
        assert tally[None].devices == {"CUDA0": 2 * GiB}
        plan = plan_slots(state, [Demand("c")], node(state))
        assert [d.model for d in plan.start] == ["c"] and plan.evict == ()  # 2 GiB used: 6 GiB free for c


class TestTwoGpus:
    def test_ts_3_1_is_judged_on_each_gpu_a_load_that_overflows_the_small_one_does_not_fit(self) -> None:
        """CUDA1 takes a quarter of the layers: with 1 GiB free it cannot, however free CUDA0 is."""
        roomy = world(devices(gpu("CUDA0", 20), gpu("CUDA1", 8)), model("a", tensor_split="3,1", fit="off"))
        foot = on_gpus(roomy, "a")
        assert foot.devices["CUDA0"] > 2 * foot.devices["CUDA1"] > 0
        assert [d.model for d in plan_slots(roomy, [Demand("a")], node(roomy)).start] == ["a"]
        tight = world(devices(gpu("CUDA0", 20), gpu("CUDA1", 1)), model("a", tensor_split="3,1", fit="off"))
        budget = node(tight).nodes[0]
        choice = placement.judge(tight.models["a"], budget, placement.NodeLoad(), {}, frozenset())
        assert choice.verdict is Verdict.IMPOSSIBLE and [s.device for s in choice.short] == ["CUDA1"]

    def test_eviction_frees_the_gpu_that_is_short_not_the_lru_model_on_another(self) -> None:
        """ "a" (on CUDA0) is the least recently used, but "c" needs CUDA1: "b", there, goes."""
        state = world(
            devices(gpu("CUDA0", 8), gpu("CUDA1", 8)),
            model("a", split_mode="none", main_gpu=0),
            model("b", split_mode="none", main_gpu=1),
            model("c", split_mode="none", main_gpu=1),
            ready("a"),
            ready("b"),
        )
        plan = plan_slots(state, [Demand("c")], node(state))
        assert plan.evict == ("b",) and plan.start == ()


class TestFit:
    def test_a_model_that_fits_only_with_fewer_layers_loads_with_them_under_fit(self) -> None:
        """A pinned model holds most of the GPU: nothing to evict, so --fit lowers the layers (the rest
        on the host) instead of refusing."""
        state = world(devices(gpu("CUDA0", 8)), model("p", pinned=True), model("b"), ready("p"))
        plan = plan_slots(state, [Demand("b")], node(state))
        assert [d.model for d in plan.start] == ["b"] and plan.evict == ()
        load = placement.loads(state, node(state).nodes)[None]
        choice = placement.judge(state.models["b"], node(state).nodes[0], load, {}, frozenset())
        assert choice.footprint is not None and 0 <= choice.footprint.gpu_layers < 33
        used = load.devices["CUDA0"] + choice.footprint.devices.get("CUDA0", 0)
        assert used <= 8 * GiB  # both fit the GPU

    def test_a_pinned_model_blocks_an_explicit_ngl_and_the_507_names_the_gpu(self) -> None:
        state = world(devices(gpu("CUDA0", 8)), model("p", pinned=True), model("b", n_gpu_layers="99"), ready("p"))
        limits = decide.Limits(models_max=4, queue_timeout=60, max_queued_requests=0, load_timeout=300)
        facts = decide.Facts(limits=limits, now=T0, mono=0.0, memory=None)
        drawn = decide.Drawn(ids=("i-new",) * 4, ports=(9999,) * 4)
        with pytest.raises(CommandRejected) as refused:
            decide.decide_load(state, Queue(), "b", "load", facts, drawn)
        extra = refused.value.extra
        assert refused.value.code == "insufficient_memory" and extra["device"] == "CUDA0"
        assert extra["device_total_bytes"] == 24 * GiB
        assert extra["device_need_bytes"] > extra["device_free_bytes"] == 8 * GiB - on_gpus(state, "p").devices["CUDA0"]
        assert "CUDA0" in refused.value.message and f"{extra['device_need_bytes'] // MIB} MiB" in refused.value.message

    def test_fit_off_is_refused_the_same_way(self) -> None:
        state = world(devices(gpu("CUDA0", 8)), model("p", pinned=True), model("b", fit="off"), ready("p"))
        with pytest.raises(CommandRejected, match="CUDA0"):
            placement.insufficient_memory(
                state.models["b"], node(state).nodes, placement.loads(state, node(state).nodes)
            )
