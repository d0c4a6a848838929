"""``python -m workers.inference --list-devices [--json]``: the devices this build of llama.cpp
computes on, then exit 0 (no model needed).

Plain: llama-server's ``--list-devices`` text (``Available devices:`` and one line per GPU, or
``(none)``), what ``modelrouter serve --list-devices`` prints. ``--json``: one JSON object
(:meth:`~service.core.devices.NodeDevices.to_json`: every device, CPU included, with its memory;
``gpu_offload``; the backends), which the service reads at start for ``node_devices_measured``.

Why a process of its own: on a CUDA build, asking a device for its memory creates a CUDA context
that holds VRAM for the life of the process, so the service never loads llama.cpp's backends itself.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from service.core.devices import NodeDevices, backends_of, list_devices

FLAG = "--list-devices"
JSON_FLAG = "--json"


def measure() -> NodeDevices:
    """This build's devices now, whether it offloads at all, and the backends it carries."""
    from workers.inference.llama import devices, supports_gpu_offload  # loads llama.cpp

    found = devices()
    return NodeDevices(devices=found, gpu_offload=supports_gpu_offload(), backends=backends_of(found))


def main(argv: Sequence[str]) -> int:
    """Print the devices (``--json``: as one object), return the exit code; any other flag is
    refused with argparse's exit 2, as the worker's command line refuses it."""
    unknown = [a for a in argv if a not in (FLAG, JSON_FLAG)]
    if unknown:
        print(f"python -m workers.inference {FLAG}: unrecognized arguments: {' '.join(unknown)}", file=sys.stderr)
        return 2
    try:
        measured = measure()
    except (OSError, RuntimeError, AttributeError) as exc:  # no llama.cpp library, or one without ggml's API
        print(f"python -m workers.inference {FLAG}: cannot read llama.cpp's devices: {exc}", file=sys.stderr)
        return 1
    as_json = JSON_FLAG in argv
    text = json.dumps(measured.to_json(), separators=(",", ":")) if as_json else list_devices(measured.devices)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return 0
