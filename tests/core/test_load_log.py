"""Where a model went, read from llama.cpp's load log (service/core/load_log.py): real lines of a
CPU load (the tiny GGUF, Gemma 3 270M) and GPU lines in llama.cpp's own formats."""

from __future__ import annotations

from service.core.devices import HOST, DeviceUse
from service.core.load_log import buffer_device, offload_report, parse_load_log

MIB = 1024 * 1024

TINY = """\
load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
load_tensors:   CPU_Mapped model buffer size =     0.22 MiB
llama_context:        CPU  output buffer size =     0.00 MiB
llama_kv_cache:        CPU KV buffer size =     2.00 MiB
sched_reserve:        CPU compute buffer size =     5.01 MiB
""".splitlines()

GEMMA = """\
print_info: n_layer               = 18
load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
load_tensors:   CPU_Mapped model buffer size =   235.16 MiB
load_tensors:   CPU_REPACK model buffer size =    12.66 MiB
llama_context:        CPU  output buffer size =     4.00 MiB
llama_kv_cache:        CPU KV buffer size =    12.00 MiB
llama_kv_cache:        CPU KV buffer size =    37.50 MiB
sched_reserve:        CPU compute buffer size =   514.50 MiB
""".splitlines()

# As src/llama-model.cpp, llama-kv-cache.cpp and llama-context.cpp print them on a CUDA build
# ("%s: %12s model buffer size = %8.2f MiB", "%s: %10s KV buffer size = ...").
CUDA = """\
load_tensors: offloading output layer to GPU
load_tensors: offloading 17 repeating layers to GPU
load_tensors: offloaded 18/19 layers to GPU
load_tensors:        CUDA0 model buffer size =   200.00 MiB
load_tensors:        CUDA1 model buffer size =    35.00 MiB
load_tensors:   CPU_Mapped model buffer size =    10.00 MiB
llama_context:  CUDA_Host  output buffer size =     4.00 MiB
llama_kv_cache:      CUDA0 KV buffer size =    30.00 MiB
llama_kv_cache:      CUDA1 KV buffer size =     6.00 MiB
sched_reserve:      CUDA0 compute buffer size =   500.00 MiB
sched_reserve:  CUDA_Host compute buffer size =     8.00 MiB
""".splitlines()


def test_a_cpu_load_is_all_host_memory_and_no_offload_line() -> None:
    log = parse_load_log(TINY)
    assert (log.offloaded, log.layers, log.devices) == (None, None, ())
    assert log.memory == (DeviceUse(HOST, round(0.22 * MIB), 2 * MIB, round(5.01 * MIB)),)


def test_gemma_counts_both_caches_and_the_repacked_weights() -> None:
    (host,) = parse_load_log(GEMMA).memory
    assert host.model_bytes == round(235.16 * MIB) + round(12.66 * MIB)
    assert host.kv_bytes == round(12.0 * MIB) + round(37.5 * MIB)
    assert host.compute_bytes == round(4.0 * MIB) + round(514.5 * MIB)  # the output buffer counts as compute


def test_a_gpu_load_names_its_devices_and_pinned_host_buffers_count_as_host() -> None:
    log = parse_load_log(CUDA)
    assert (log.offloaded, log.layers) == (18, 19)
    assert log.devices == ("CUDA0", "CUDA1")
    by = {use.device: use for use in log.memory}
    assert by["CUDA0"] == DeviceUse("CUDA0", 200 * MIB, 30 * MIB, 500 * MIB)
    assert by["CUDA1"] == DeviceUse("CUDA1", 35 * MIB, 6 * MIB, 0)
    assert by[HOST] == DeviceUse(HOST, 10 * MIB, 0, 12 * MIB)


def test_buffer_names_map_to_devices() -> None:
    names = ["CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host", "Vulkan_Host", "Vulkan0", "CUDA1", "MTL0_Mapped", "MTL0"]
    assert [buffer_device(n) for n in names] == [HOST] * 5 + ["Vulkan0", "CUDA1", "MTL0", "MTL0"]


def test_the_report_without_an_offload_line_says_nothing_offloaded_of_n_layer_plus_one() -> None:
    report = offload_report(parse_load_log(GEMMA), requested="99", gpu_layers=99, n_layer=18, fit=("why",))
    assert (report.requested, report.gpu_layers, report.offloaded, report.layers) == ("99", 99, 0, 19)
    assert report.device_bytes == 0 and report.fit == ("why",)
    gpu = offload_report(parse_load_log(CUDA), requested="auto", gpu_layers=-1, n_layer=18)
    assert (gpu.offloaded, gpu.layers, gpu.devices) == (18, 19, ("CUDA0", "CUDA1"))
    assert gpu.device_bytes == (200 + 35 + 30 + 6 + 500) * MIB


def test_a_worker_log_record_around_the_line_still_parses() -> None:
    wrapped = '{"event": "llama_cpp", "level": "info", "text": "load_tensors: offloaded 3/3 layers to GPU"}'
    assert parse_load_log([wrapped]).offloaded == 3
