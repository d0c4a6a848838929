"""The build's own check: a llama.cpp library runs here unless it has AMX or a feature this CPU lacks."""

from __future__ import annotations

import platform

import pytest

from devtools import llama_build

INFO = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 |"
X86 = platform.machine().lower() in ("x86_64", "amd64")


def test_a_build_with_amx_is_refused_whatever_the_cpu() -> None:
    wrong = llama_build.problems(INFO + " AMX_INT8 = 1 |", cpu_flags="avx avx2 amx_int8 amx_tile")
    assert wrong and "AMX_INT8" in wrong[0] and "crash" in wrong[0]


@pytest.mark.skipif(not X86, reason="the instruction-set features are x86-64's")
def test_a_build_for_another_cpu_is_refused_naming_what_this_one_lacks() -> None:
    wrong = llama_build.problems(INFO + " AVX512 = 1 | AVX512_VNNI = 1 |", cpu_flags="pni ssse3 avx avx2 f16c fma bmi2")
    assert wrong == ["AVX512 (this CPU has no avx512f)", "AVX512_VNNI (this CPU has no avx512_vnni)"]


def test_a_build_that_matches_the_cpu_runs_here() -> None:
    assert llama_build.problems(INFO, cpu_flags="pni ssse3 avx avx2 f16c fma bmi2") == []


def test_the_flags_drop_only_amx_and_keep_native_code() -> None:
    args = llama_build.cmake_args()
    assert "-DGGML_NATIVE=ON" in args
    if X86:
        assert all("-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in a for a in args if "FLAGS" in a)


def test_the_installed_library_passes_its_own_check() -> None:
    assert llama_build.problems(llama_build.system_info()) == []
