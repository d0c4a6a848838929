"""What a model takes on each of a node's devices, for placement: its footprint, loaded or to load.

A node's budget (:class:`~service.core.placement.NodeBudget`) lists the GPUs its last
``node_devices_measured`` reported (:func:`node_gpus`), each with the memory that was free when it
was measured (the node's start, before its models): that is what the node's models may use there,
as ``memory`` is what they may use of its RAM.

A model's :class:`Footprint` is its need by device (:mod:`service.core.device_memory`) after
``--fit`` (:mod:`service.core.fit`): the host part is what the RAM budget is checked against (the
whole estimate where nothing is offloaded, as before devices were known). A running model counts
what its worker reported on each GPU (``instance_ready``'s offload) when it did, else the estimate;
its host part is always the estimate's, so RAM decisions stay a function of the log's estimates.

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from service.core.device_memory import split_need
from service.core.devices import HOST, MIB, Device
from service.core.fit import fit_offload
from service.core.launch_devices import gpu_layers_number
from service.core.memory import launch_of, need_bytes
from service.core.state import ModelState, RouterState


@dataclass(frozen=True, slots=True)
class Footprint:
    """A model's need: ``host`` bytes of RAM and bytes by GPU name; ``gpu_layers`` as ``--fit`` set
    them (-1: as asked)."""

    host: int
    devices: Mapping[str, int] = field(default_factory=dict)
    gpu_layers: int = -1


@dataclass(frozen=True, slots=True)
class DeviceShort:
    """A GPU a model does not fit even with every unpinned model gone: its figures for the 507."""

    device: str
    need: int
    total: int
    free: int

    def words(self) -> str:
        return (
            f"{self.need // MIB} MiB on {self.device}, which has {self.total // MIB} MiB in all "
            f"and {max(self.free, 0) // MIB} MiB free"
        )


def node_gpus(state: RouterState, node: str | None) -> tuple[Device, ...]:
    """The GPUs of ``node`` (None: the service without ``--node``) that its build offloads to."""
    measured = state.devices.get(node or "")
    if measured is None or not measured.gpu_offload:
        return ()
    return measured.offloading


def squeezable(model: ModelState) -> bool:
    """Whether ``--fit`` may lower the model's layers: ``--fit on`` and ``-ngl auto``."""
    launch = launch_of(model.config.params)
    return launch.fit == "on" and gpu_layers_number(launch.n_gpu_layers) == -1


def footprint(model: ModelState, devices: tuple[Device, ...], used: Mapping[str, int] | None = None) -> Footprint:
    """What ``model`` would take loaded on a node with ``devices``, ``used`` bytes of each already
    taken by other models (None: the devices as measured, empty of models)."""
    shape = model.shape
    if shape is None:
        return Footprint(need_bytes(None, model.config.params))
    launch = launch_of(model.config.params)
    if not devices:
        return Footprint(need_bytes(shape, model.config.params, model.config.args))
    now = devices if used is None else tuple(replace(d, free_bytes=d.free_bytes - used.get(d.name, 0)) for d in devices)
    plan = fit_offload(shape, launch, now)
    sized = replace(launch, n_ctx=plan.n_ctx) if plan.n_ctx > 0 else launch
    uses = split_need(shape, sized, now, plan.gpu_layers)
    host = sum(u.total_bytes for u in uses if u.device == HOST)
    return Footprint(host, {u.device: u.total_bytes for u in uses if u.device != HOST}, plan.gpu_layers)


def running_footprint(model: ModelState, devices: tuple[Device, ...]) -> Footprint:
    """A running model's footprint: the GPUs' figures its worker reported, else the estimate's."""
    planned = footprint(model, devices)
    offload = model.instance.offload if model.instance is not None else None
    if offload is None or not offload.memory:
        return planned
    reported = {u.device: u.total_bytes for u in offload.memory if u.device != HOST}
    return Footprint(planned.host, reported, offload.gpu_layers)
