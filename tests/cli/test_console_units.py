"""The CLI's small pure parts: the SSE parser, human units, bytes across file bars, ps's device cells."""

from __future__ import annotations

from rich.console import Console
from rich.progress import Progress

from service.console.client import sse_events
from service.console.format import duration, size
from service.console.pull import FileBars
from service.console.where import devices, gpu_layers


def test_sse_parser_joins_data_lines_and_skips_comments() -> None:
    lines = [
        ": keep-alive",
        "retry: 1000",
        "",
        "id: 7",
        "event: download_progress",
        'data: {"a":',
        "data: 1}",
        "",
        "data: second",
        "",
    ]
    assert list(sse_events(iter(lines))) == [("download_progress", "7", '{"a":\n1}'), ("message", "7", "second")]


def test_units() -> None:
    assert [size(None), size(999), size(240_224), size(253_100_000)] == ["-", "999 B", "240.2 kB", "253.1 MB"]
    assert [duration(None), duration(0.25), duration(12.34), duration(245), duration(7380)] == [
        "-",
        "250 ms",
        "12.3 s",
        "4m05s",
        "2h03m",
    ]


def test_job_bytes_fill_the_file_bars_in_path_order() -> None:
    """The worker fetches files one after the other, sorted by path."""
    progress = Progress(console=Console(file=None, force_terminal=False))
    bars = FileBars(progress, [{"path": "b-00002.gguf", "size": 100}, {"path": "b-00001.gguf", "size": 300}])
    bars.show(350)
    done = {t.description: t.completed for t in progress.tasks}
    assert done == {"b-00001.gguf": 300, "b-00002.gguf": 50}


def test_where_a_model_runs_in_ps_cells() -> None:
    """GPU LAYERS and DEVICES from a ``GET /models`` entry: the memory on each GPU (host memory
    left out), ``CPU`` when nothing went to one, ``-`` when the worker said nothing."""
    vulkan = {"device": "Vulkan0", "model_bytes": 0, "kv_bytes": 0, "compute_bytes": 0, "total_bytes": 40_000_000}
    split = {
        "gpu_layers": {"requested": "all", "offloaded": 33, "total": 33},
        "offload": {
            "devices": ["Vulkan0", "Vulkan1"],
            "memory": [vulkan, {**vulkan, "device": "Vulkan1", "total_bytes": 25_000_000}, {**vulkan, "device": "CPU"}],
        },
    }
    assert (gpu_layers(split), devices(split)) == ("33/33 (-ngl all)", "Vulkan0 40.0 MB, Vulkan1 25.0 MB")
    cpu = {"gpu_layers": {"requested": "auto", "offloaded": 0, "total": 3}, "offload": {"devices": [], "memory": []}}
    assert (gpu_layers(cpu), devices(cpu)) == ("0/3 (-ngl auto)", "CPU")
    assert (gpu_layers({"offload": None, "gpu_layers": None}), devices({})) == ("-", "-")
