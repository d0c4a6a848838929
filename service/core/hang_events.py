"""A ready worker given up as hung (issue 29 §1): decided by :mod:`service.core.instance_hangs`.

Kept beside :mod:`service.core.events`, which re-exports it and lists it in its registry; the
catalogue is ``docs/event-catalogue.md``. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from service.core.event_base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceUnresponsive(Event):
    """The service gave a ready worker up as hung (``service.core.liveness``): it stopped answering
    its heartbeat (``cause`` ``no_answer``: a stopped process, a swap storm), or one engine step ran
    longer than the bound (``step_stuck``: a deadlock or a driver fault inside ``llama_decode``), or requests
    waited and no step began for the bound (``no_progress``).
    What was seen: the last step number, how long ago the step counter last moved, how long ago the
    worker last answered, the requests in flight to it. The worker is stopped next (SIGKILL after
    the stop grace) and its requests get a 503; the end is ``instance_stopped`` reason ``unresponsive``."""

    TYPE: ClassVar[str] = "instance_unresponsive"
    instance_id: str
    cause: str  # "no_answer" | "step_stuck" | "no_progress"
    bound_s: float  # the hang timeout in force for the model
    steps: int  # the engine's step counter at the last answer
    last_step_s: float  # seconds since the step counter last moved (or since the worker was ready)
    silent_s: float  # seconds since the worker last answered a heartbeat
    requests_waiting: int  # requests the service was proxying to it
