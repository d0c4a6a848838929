"""make gpu-check: a clear "no GPU" line and exit 0 where there is none; the carry keeps what builds read."""

from __future__ import annotations

import subprocess
import sys
import tarfile

import pytest

from devtools import gpu_check


@pytest.mark.skipif(gpu_check._why_no_gpu() is None, reason="this machine has an NVIDIA GPU and nvcc")
def test_without_a_gpu_it_says_so_and_exits_0() -> None:
    done = subprocess.run([sys.executable, "-m", "devtools.gpu_check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("no GPU: "), done


@pytest.mark.parametrize(
    ("name", "trimmed"),
    [
        ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-llama.gguf", True),
        ("llama_cpp_python-0.3.36/.git/modules/vendor/llama.cpp/pack", True),
        ("llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml-sycl/ggml-sycl.cpp", True),
        ("llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu", False),
        ("llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp", False),
        ("llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/server.cpp", False),
        ("llama_cpp_python-0.3.36/vendor/llama.cpp/scripts/ui-assets.cmake", False),
        ("llama_cpp_python-0.3.36/llama_cpp/llama_cpp.py", False),
    ],
)
def test_the_carry_drops_only_what_no_build_reads(name: str, trimmed: bool) -> None:
    assert gpu_check._trimmed(tarfile.TarInfo(name)) is trimmed
