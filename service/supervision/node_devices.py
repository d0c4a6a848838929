"""This node's compute devices, measured at start by a child process: ``node_devices_measured``.

The service never loads llama.cpp's backends itself: on a CUDA build, asking a device for its memory
creates a CUDA context that holds hundreds of MiB of VRAM for the life of the process. So it runs the
inference worker's ``--list-devices --json`` (:mod:`workers.inference._list_devices`) with the
workers' environment (their ``LLAMA_CPP_LIB_PATH``, ``CUDA_VISIBLE_DEVICES``...) and reads its one
JSON line.

When: :func:`service.startup.start` starts the child first of all, so it runs while the log is
migrated, the fold rebuilt and the model sources listed (the child takes ~0.1 s on this CPU build,
import and ggml's device scan; CUDA's initialisation, ~0.5-2 s, overlaps the same work), and waits
for it just before the first load: placement has the devices before it places anything. A child
that fails, or does not answer within :data:`MEASURE_TIMEOUT`, never fails the start: the service
logs a warning and records the event with no devices (placement then counts host memory only, as
before issue 31).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import structlog

from service.core import events as ev
from service.core.devices import NodeDevices

_log = structlog.get_logger(__name__)
MEASURE_TIMEOUT = 20.0
"""Seconds the child may take: CUDA's initialisation on a machine of 8 GPUs takes a few; a child
still silent after this is stuck (a hung driver) and is killed."""


def list_devices_argv(*, as_json: bool) -> list[str]:
    """``python -m workers.inference --list-devices`` (``--json``: the object the service reads)."""
    return [sys.executable, "-m", "workers.inference", "--list-devices", *(["--json"] if as_json else [])]


@dataclass(frozen=True, slots=True)
class Measurement:
    """What the child said (``devices``), or why it said nothing usable (``error``, with no devices)."""

    devices: NodeDevices
    error: str | None = None

    def event(self, node: str | None) -> ev.NodeDevicesMeasured:
        """``node_devices_measured`` for ``node`` (None: a service without ``--node``)."""
        return ev.NodeDevicesMeasured(
            node=node,
            devices=tuple(d.to_json() for d in self.devices.devices),
            gpu_offload=self.devices.gpu_offload,
            backends=self.devices.backends,
        )


def _parsed(stdout: bytes) -> NodeDevices:
    """The last line that is a JSON object (llama.cpp's own lines, if a backend prints any, come before)."""
    for line in reversed(stdout.decode(errors="replace").splitlines()):
        if line.startswith("{"):
            value = json.loads(line)
            if isinstance(value, dict):
                return NodeDevices.of(value)
    msg = "no JSON object on its stdout"
    raise ValueError(msg)


def _last_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(nothing on stderr)"


async def measure(
    env: Mapping[str, str], timeout: float = MEASURE_TIMEOUT, argv: Sequence[str] | None = None
) -> Measurement:
    """Run the child (``argv``: :func:`list_devices_argv` unless given) and read its answer; never raises
    but for cancellation, which kills the child first."""
    command = list(argv) if argv is not None else list_devices_argv(as_json=True)
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
        )
    except OSError as exc:
        return Measurement(NodeDevices(), f"cannot start {command[0]}: {exc}")
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        await _kill(proc)
        return Measurement(NodeDevices(), f"no answer within {timeout:g} s")
    except BaseException:  # cancelled (a start that failed): no child outlives it
        await _kill(proc)
        raise
    if proc.returncode != 0:
        return Measurement(NodeDevices(), f"exit {proc.returncode}: {_last_line(stderr)}")
    try:
        return Measurement(_parsed(stdout))
    except ValueError as exc:
        return Measurement(NodeDevices(), f"unreadable answer: {exc}")


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
    await proc.wait()


def logged(measurement: Measurement, node: str | None) -> Measurement:
    """Say in the service's log what was found, or (a warning) why nothing was."""
    if measurement.error is not None:
        _log.warning(
            "devices_not_measured",
            node=node,
            error=measurement.error,
            note="placement counts host memory only; `python -m workers.inference --list-devices` shows the fault",
        )
    else:
        names = [d.name for d in measurement.devices.devices]
        _log.info("devices_measured", node=node, devices=names, gpu_offload=measurement.devices.gpu_offload)
    return measurement
