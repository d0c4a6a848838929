"""Each node's devices in the fold (``node_devices_measured``) and the values that carry them.

The fold keeps every node's last measurement by name (``""``: a service without ``--node``), a
later one replacing it; a measurement survives a snapshot, and reading one back is tolerant of
fields a newer writer adds. No fixtures: the fold of a short log.
"""

from __future__ import annotations

import json

from service.core import events as ev
from service.core.devices import LOCAL_NODE, Device, NodeDevices, backends_of, list_devices, shown_node
from service.core.fold import replay
from service.core.snapshot import state_from_json, state_to_json
from service.core.state import RouterState
from tests.core.test_placement import Entry, joined, recorded

GiB = 1024**3
CPU = Device("CPU", "Intel(R) Xeon(R) Processor", "cpu", "CPU", 24 * GiB, 20 * GiB)
GPU0 = Device("CUDA0", "NVIDIA GeForce RTX 4090", "gpu", "CUDA", 24 * GiB, 23 * GiB)
GPU1 = Device("CUDA1", "NVIDIA GeForce RTX 3090", "gpu", "CUDA", 24 * GiB, 2 * GiB)


def measured(node: str | None, *devices: Device, offload: bool = False) -> Entry:
    event = ev.NodeDevicesMeasured(
        node=node, devices=tuple(d.to_json() for d in devices), gpu_offload=offload, backends=backends_of(devices)
    )
    return (event, None, node)


def fold(*entries: Entry) -> RouterState:
    return replay(recorded(*entries))


def test_each_node_keeps_its_own_last_measurement() -> None:
    state = fold(*joined("a", 8 * GiB), measured("a", CPU), measured("b", CPU, GPU0, GPU1, offload=True))
    assert state.devices["a"] == NodeDevices((CPU,), False, ("CPU",))
    assert state.devices["b"] == NodeDevices((CPU, GPU0, GPU1), True, ("CPU", "CUDA"))
    assert state.devices["b"].offloading == (GPU0, GPU1)
    later = replay(recorded(measured("a", CPU, GPU0, offload=True), after=state), state)
    assert later.devices["a"].devices == (CPU, GPU0) and later.devices["b"] == state.devices["b"]


def test_a_service_without_node_is_kept_under_the_empty_name_and_shown_as_local() -> None:
    state = fold(measured(None, CPU))
    assert dict(state.devices) == {"": NodeDevices((CPU,), False, ("CPU",))}
    assert state.nodes == {}, "the measurement makes no node: placement is unchanged"
    assert shown_node(None) == LOCAL_NODE == "local" and shown_node("a") == "a"


def test_a_failed_measurement_records_no_devices() -> None:
    state = fold(measured(None, CPU, GPU0, offload=True), measured(None))
    assert state.devices[""] == NodeDevices()


def test_devices_survive_a_snapshot() -> None:
    state = fold(measured(None, CPU), measured("b", CPU, GPU0, offload=True))
    restored = state_from_json(json.loads(json.dumps(state_to_json(state))))
    assert restored == state and restored.devices["b"].devices[1].type == "gpu"


def test_the_measurement_reads_back_what_it_wrote_and_tolerates_more() -> None:
    value = NodeDevices((CPU, GPU0), True, ("CPU", "CUDA"))
    assert NodeDevices.of(json.loads(json.dumps(value.to_json()))) == value
    newer = {**value.to_json(), "driver": "550.1", "devices": [{**GPU0.to_json(), "uuid": "GPU-1"}, "junk"]}
    assert NodeDevices.of(newer) == NodeDevices((GPU0,), True, ("CPU", "CUDA"))
    assert NodeDevices.of({"gpu_offload": "yes"}) == NodeDevices(), "only a JSON true offloads"


def test_backends_are_distinct_in_ggml_order() -> None:
    assert backends_of((CPU, GPU0, GPU1)) == ("CPU", "CUDA")
    assert backends_of((GPU0, CPU)) == ("CUDA", "CPU") and backends_of(()) == ()


def test_the_listing_is_llama_servers() -> None:
    """common_print_available_devices: the devices that are not the CPU, or ``(none)``."""
    assert list_devices((CPU,)) == "Available devices:\n  (none)"
    assert (
        list_devices((CPU, GPU0)) == "Available devices:\n  CUDA0: NVIDIA GeForce RTX 4090 (24576 MiB, 23552 MiB free)"
    )
    blas = Device("BLAS", "OpenBLAS", "accel", "BLAS", 0, 0)
    assert list_devices((CPU, blas)) == "Available devices:\n  BLAS: OpenBLAS (0 MiB, 0 MiB free)"
    assert not blas.offloads, "an accelerator is listed, as llama-server lists it, but takes no layers"
