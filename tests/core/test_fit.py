"""llama-server's ``--fit`` over our estimate: the context first (when ``-c`` is unset), down to
``--fit-ctx``, then the layers (when ``-ngl`` is auto), each GPU keeping its ``-fitt`` margin."""

from __future__ import annotations

import dataclasses

from service.core.device_memory import split_need
from service.core.devices import HOST, MIB, Device
from service.core.fit import UNCHANGED, FitPlan, fit_offload, margins
from service.core.launch import InferenceLaunch
from tests.core.shapes import llama_8b

GiB = 1024**3
CPU = Device("CPU", "host", "cpu", "CPU", 64 * GiB, 60 * GiB)
# A Llama-3.1-8B-like Q4_K_M: 32 layers, 8 KV heads of 128, a 131072-cell training context.
LLAMA = llama_8b(n_ctx_train=131072)  # Llama-3.1's 131072-cell training context


def gpu(name: str, free_gib: float) -> Device:
    return Device(name, name, "gpu", "CUDA", 24 * GiB, int(free_gib * GiB))


def on_gpu(launch: InferenceLaunch, plan: FitPlan, devices: tuple[Device, ...]) -> dict[str, int]:
    sized = dataclasses.replace(launch, n_ctx=plan.n_ctx) if plan.n_ctx else launch
    return {u.device: u.total_bytes for u in split_need(LLAMA, sized, devices, plan.gpu_layers) if u.device != HOST}


def test_a_model_that_fits_changes_nothing() -> None:
    assert fit_offload(LLAMA, InferenceLaunch(), (CPU, gpu("CUDA0", 20))) == UNCHANGED


def test_fit_off_no_gpu_and_sm_tensor_change_nothing() -> None:
    small = (CPU, gpu("CUDA0", 2))
    assert fit_offload(LLAMA, InferenceLaunch(fit="off"), small) == UNCHANGED
    assert fit_offload(LLAMA, InferenceLaunch(), (CPU,)) == UNCHANGED
    assert fit_offload(LLAMA, InferenceLaunch(device="none"), small) == UNCHANGED
    assert fit_offload(LLAMA, InferenceLaunch(split_mode="tensor"), small) == UNCHANGED


def test_an_unset_context_shrinks_first_to_the_largest_that_fits() -> None:
    """``-c 0`` (the training context, 16 GiB of KV cache here) on 12 GiB free: the context goes down
    in steps of 256, every layer stays on the GPU, which keeps its 1024 MiB margin."""
    launch, devices = InferenceLaunch(n_ctx=0), (CPU, gpu("CUDA0", 12))
    plan = fit_offload(LLAMA, launch, devices)
    assert plan.gpu_layers == -1 and 4096 < plan.n_ctx < 131072 and plan.n_ctx % 256 == 0
    assert on_gpu(launch, plan, devices)["CUDA0"] <= 11 * GiB
    bigger = dataclasses.replace(plan, n_ctx=plan.n_ctx + 256)
    assert on_gpu(launch, bigger, devices)["CUDA0"] > 11 * GiB  # the largest
    assert plan.changes == (
        f"-c 131072 -> {plan.n_ctx}: the KV cache did not fit CUDA0's 12288 MiB free with its 1024 MiB margin",
    )


def test_then_the_layers_go_down_when_fit_ctx_is_not_enough() -> None:
    launch, devices = InferenceLaunch(n_ctx=0), (CPU, gpu("CUDA0", 4))
    plan = fit_offload(LLAMA, launch, devices)
    assert plan.n_ctx == 4096  # --fit-ctx's floor
    assert 0 < plan.gpu_layers < 33
    assert on_gpu(launch, plan, devices)["CUDA0"] <= 3 * GiB
    more = dataclasses.replace(plan, gpu_layers=plan.gpu_layers + 1)
    assert on_gpu(launch, more, devices)["CUDA0"] > 3 * GiB  # the most that fit
    assert plan.changes[-1].startswith(f"-ngl auto -> {plan.gpu_layers} of 33 layers: the model did not fit CUDA0")


def test_an_explicit_context_is_kept_and_only_the_layers_change() -> None:
    launch, devices = InferenceLaunch(n_ctx=32768), (CPU, gpu("CUDA0", 6))
    plan = fit_offload(LLAMA, launch, devices)
    assert plan.n_ctx == 0 and 0 < plan.gpu_layers < 33 and len(plan.changes) == 1


def test_an_explicit_ngl_is_kept_and_said() -> None:
    plan = fit_offload(LLAMA, InferenceLaunch(n_gpu_layers="99"), (CPU, gpu("CUDA0", 2)))
    assert plan.gpu_layers == -1 and plan.n_ctx == 0
    assert plan.changes == ("-ngl 99 kept (set by the user): CUDA0's 2048 MiB free with its 1024 MiB margin",)


def test_fit_target_sets_each_devices_margin() -> None:
    assert margins(InferenceLaunch(), 2) == (1024 * MIB, 1024 * MIB)
    assert margins(InferenceLaunch(fit_target="512"), 2) == (512 * MIB, 512 * MIB)
    assert margins(InferenceLaunch(fit_target="512,2048"), 3) == (512 * MIB, 2048 * MIB, 1024 * MIB)
    devices = (CPU, gpu("CUDA0", 6.5))  # the model (about 5 GiB) fits a 1 GiB margin, not a 2 GiB one
    assert fit_offload(LLAMA, InferenceLaunch(), devices) == UNCHANGED
    assert fit_offload(LLAMA, InferenceLaunch(fit_target="2048"), devices).gpu_layers < 33


def test_several_gpus_each_keep_their_margin() -> None:
    launch, devices = InferenceLaunch(), (CPU, gpu("CUDA0", 3), gpu("CUDA1", 3))
    plan = fit_offload(LLAMA, launch, devices)
    assert 0 < plan.gpu_layers < 33
    used = on_gpu(launch, plan, devices)
    assert all(size <= 2 * GiB for size in used.values()) and set(used) == {"CUDA0", "CUDA1"}


def test_a_ts_set_by_the_user_is_not_refitted() -> None:
    plan = fit_offload(LLAMA, InferenceLaunch(tensor_split="1,1"), (CPU, gpu("CUDA0", 2), gpu("CUDA1", 2)))
    assert plan.gpu_layers == -1 and "-ts set by the user" in plan.changes[-1]


def test_a_gpu_that_reports_no_memory_is_not_fitted_to() -> None:
    """llama.cpp: "device ... did not report memory; --fit will not use it": the load goes as asked."""
    silent = Device("Vulkan0", "Vulkan0", "gpu", "Vulkan", 0, 0)
    assert fit_offload(LLAMA, InferenceLaunch(n_ctx=0), (CPU, silent)) == UNCHANGED
