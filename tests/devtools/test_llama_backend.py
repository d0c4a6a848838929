"""The backend the build chooses, as a pure function of the machine's facts, one case each; and what the
check says of a library's backends."""

from __future__ import annotations

import dataclasses
import hashlib
import platform
import sys

import pytest

from devtools import llama_build
from devtools.llama_backend import (
    CUDA_DEFAULT_ARCHS,
    BackendUnavailable,
    MachineFacts,
    choose_backend,
    gather_facts,
)
from devtools.llama_check import LibraryBackends, LibraryDevice, backend_problems

CPU_ARGS = ("-DGGML_NATIVE=ON", "-DCMAKE_C_FLAGS=-mno-amx-tile")
LINUX = MachineFacts(system="Linux", machine="x86_64")
NVCC = "/usr/local/cuda/bin/nvcc"
H200 = MachineFacts(system="Linux", machine="x86_64", nvcc=NVCC, nvidia_gpus=("9.0",))
VULKAN = MachineFacts(
    system="Linux",
    machine="x86_64",
    glslc="/usr/bin/glslc",
    vulkan_header="/usr/include/vulkan/vulkan_core.h",
    vulkan_header_version=290,
    spirv_headers="/usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake",
)
ROCM = MachineFacts(system="Linux", machine="x86_64", hipcc="/opt/rocm/bin/hipcc", amd_gpus=("gfx1100",))
MAC = MachineFacts(system="Darwin", machine="arm64")


def _with(facts: MachineFacts, **changes: object) -> MachineFacts:
    return dataclasses.replace(facts, **changes)  # type: ignore[arg-type]


def test_no_toolkit_builds_for_the_cpu_with_only_the_cpu_flags_and_says_why() -> None:
    got = choose_backend(LINUX, CPU_ARGS)
    assert (got.backend, got.cmake_args, got.gpu_archs) == ("cpu", CPU_ARGS, ())
    assert got.line().startswith("llama-cpp-python: cpu backend (no nvcc, no CUDA toolkit under /usr/local/cuda")
    assert "set MODELROUTER_LLAMA_BACKEND to choose" in got.line()


def test_nvcc_and_a_gpu_build_cuda_for_that_gpu_natively_after_the_cpu_flags() -> None:
    got = choose_backend(H200, CPU_ARGS)
    assert got.backend == "cuda" and got.gpu_archs == ("90",)
    assert got.cmake_args[: len(CPU_ARGS)] == CPU_ARGS  # AMX off and -march=native stay for the CPU part
    assert "-DGGML_CUDA=on" in got.cmake_args and "-DCMAKE_CUDA_ARCHITECTURES=native" in got.cmake_args
    assert "nvcc at /usr/local/cuda/bin/nvcc" in got.reason and "native: 90" in got.reason


def test_two_gpus_of_two_generations_are_both_in_the_key() -> None:
    assert choose_backend(_with(H200, nvidia_gpus=("8.6", "9.0", "8.6")), ()).gpu_archs == ("86", "90")


def test_nvcc_without_a_gpu_stays_on_the_cpu_and_says_how_to_build_cuda() -> None:
    got = choose_backend(_with(H200, nvidia_gpus=()), CPU_ARGS)
    assert got.backend == "cpu" and got.cmake_args == CPU_ARGS
    assert "no GPU answers nvidia-smi" in got.reason and "MODELROUTER_LLAMA_BACKEND=cuda" in got.reason


def test_cuda_asked_for_without_a_gpu_builds_the_documented_architectures() -> None:
    got = choose_backend(_with(H200, nvidia_gpus=(), requested="cuda"), CPU_ARGS)
    assert got.backend == "cuda" and got.gpu_archs == CUDA_DEFAULT_ARCHS
    assert f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(CUDA_DEFAULT_ARCHS)}" in got.cmake_args


def test_apple_silicon_builds_metal_and_an_intel_mac_does_not_choose_it() -> None:
    assert choose_backend(MAC, ()).backend == "metal"
    assert "-DGGML_METAL=on" in choose_backend(MAC, ()).cmake_args
    assert choose_backend(_with(MAC, machine="x86_64"), ()).backend == "cpu"


def test_hip_and_vulkan_are_built_only_when_asked_for() -> None:
    assert choose_backend(ROCM, ()).backend == "cpu"
    assert "MODELROUTER_LLAMA_BACKEND=hip builds for it" in choose_backend(ROCM, ()).reason
    assert choose_backend(VULKAN, ()).backend == "cpu"
    hip = choose_backend(_with(ROCM, requested="hip"), ())
    assert (hip.backend, hip.gpu_archs) == ("hip", ("gfx1100",))
    assert hip.cmake_args == ("-DGGML_HIP=on", "-DGPU_TARGETS=gfx1100")
    vulkan = choose_backend(_with(VULKAN, requested="Vulkan"), CPU_ARGS)
    assert vulkan.backend == "vulkan" and vulkan.cmake_args == (*CPU_ARGS, "-DGGML_VULKAN=on")
    assert vulkan.patches == ()


@pytest.mark.parametrize(("version", "patched"), [(239, True), (271, True), (None, True), (272, False), (290, False)])
def test_vulkan_headers_older_than_1_3_272_get_the_layer_settings_guard(version: int | None, patched: bool) -> None:
    """Debian 12's 1.3.239 lacks VK_EXT_layer_settings; an unreadable version is guarded too (the guarded
    source compiles on every version)."""
    got = choose_backend(_with(VULKAN, requested="vulkan", vulkan_header_version=version), CPU_ARGS)
    assert got.patches == (("vulkan-layer-settings",) if patched else ())
    assert ("VK_EXT_layer_settings guarded" in got.reason) is patched


def test_the_variable_wins_over_the_machine() -> None:
    got = choose_backend(_with(H200, requested="cpu"), CPU_ARGS)
    assert (got.backend, got.cmake_args) == ("cpu", CPU_ARGS)
    assert got.reason == "MODELROUTER_LLAMA_BACKEND=cpu"
    assert choose_backend(_with(H200, requested="auto"), ()).backend == "cuda"


@pytest.mark.parametrize(
    ("facts", "asked", "words"),
    [
        (LINUX, "cuda", "no nvcc on PATH nor under /usr/local/cuda/bin"),
        (LINUX, "metal", "Metal exists on macOS only"),
        (LINUX, "hip", "no hipcc"),
        (_with(VULKAN, glslc=None), "vulkan", "no glslc"),
        (_with(VULKAN, vulkan_header=None), "vulkan", "no Vulkan headers"),
        (
            _with(VULKAN, spirv_headers=None),
            "vulkan",
            "no SPIRV-Headers: install the Vulkan SDK (Debian: apt-get install",
        ),
        (_with(VULKAN, glslc=None, spirv_headers=None), "vulkan", "glslc, no SPIRV-Headers"),
        (MAC, "cpu", "forces GGML_METAL on"),
        (LINUX, "opencl", "choose one of cpu, cuda, metal, hip, vulkan"),
    ],
)
def test_a_backend_asked_for_that_cannot_be_built_fails_naming_what_is_missing(
    facts: MachineFacts, asked: str, words: str
) -> None:
    with pytest.raises(BackendUnavailable) as failed:
        choose_backend(_with(facts, requested=asked), CPU_ARGS)
    assert "MODELROUTER_LLAMA_BACKEND=" in str(failed.value) and words in str(failed.value)


def test_the_users_cmake_args_come_last_so_theirs_win() -> None:
    got = choose_backend(_with(H200, user_cmake_args="-DCMAKE_CUDA_ARCHITECTURES=61 -DGGML_CUDA_FA=off"), CPU_ARGS)
    assert got.cmake_args[-2:] == ("-DCMAKE_CUDA_ARCHITECTURES=61", "-DGGML_CUDA_FA=off")
    assert "your CMAKE_ARGS last" in got.reason


def test_the_machines_facts_read_nothing_from_an_empty_environment() -> None:
    facts = gather_facts({})
    assert (facts.requested, facts.user_cmake_args, facts.system) == ("", "", platform.system())


@pytest.mark.skipif(llama_build.choice().backend != "cpu", reason="this machine builds a GPU backend")
def test_a_cpu_builds_key_is_the_digest_it_had_before_backends_existed() -> None:
    """CI caches the CPU wheel under its key: a CPU build must keep it."""
    parts = [
        llama_build.pinned_version(),
        *llama_build.cmake_args(),
        platform.machine(),
        llama_build._cpu_flags(),
        llama_build._compiler(),
        sys.version,
    ]
    assert llama_build.build_key() == hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


GPU_LIB = LibraryBackends(True, (LibraryDevice("CUDA0", "gpu", "CUDA"), LibraryDevice("CPU", "cpu", "CPU")))
CPU_LIB = LibraryBackends(False, (LibraryDevice("CPU", "cpu", "CPU"),))


def test_the_check_wants_offload_and_a_device_of_the_backend() -> None:
    assert backend_problems("cuda", GPU_LIB) == []
    assert backend_problems("cpu", CPU_LIB) == [] and backend_problems("cpu", GPU_LIB) == []
    wrong = backend_problems("cuda", CPU_LIB)
    assert len(wrong) == 2 and "llama_supports_gpu_offload() is false" in wrong[0] and "no CUDA device" in wrong[1]
    assert backend_problems("vulkan", GPU_LIB) == [
        "no Vulkan device in its device list (was the driver found? is the GPU visible?)"
    ]
