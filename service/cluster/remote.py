"""What another node decided for this one: spawn the workers it placed here, stop those it evicted,
run the downloads it placed here and cancel those it asked to.

Any node may take a placement decision; it is an event (``instance_requested``
with ``node``, ``instance_stop_requested``, ``download_requested`` with
``node``, ``download_cancel_requested``) and the node that runs the workers
carries it out when its tail folds the event, through the same performers as
its own decisions. Decisions this node took itself are already performed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from service.core import download_lifecycle
from service.core import events as ev
from service.core import instance_decisions as decide
from service.core.fold_nodes import source_node
from service.core.state import RouterState
from service.supervision.interpreter import Interpreter


class RemoteDecisions:
    """A LiveState listener that performs, on this node, what other nodes decided for it."""

    def __init__(self, node: str, interpreter: Interpreter, free_port: Callable[[], int]) -> None:
        self._node = node
        self._interpreter = interpreter
        self._free_port = free_port  # a port for a worker placed here by a node that could not draw one

    def on_event(self, recorded: ev.Recorded, state: RouterState) -> None:
        """Perform ``recorded`` when another node wrote it about this node's workers."""
        if source_node(recorded) == self._node or recorded.model is None:
            return
        e = recorded.event
        if isinstance(e, ev.InstanceRequested) and e.node == self._node:
            request = dataclasses.replace(e, port=e.port or self._free_port())
            self._interpreter.perform([decide.Spawn(recorded.model, request)])
        elif isinstance(e, ev.DownloadRequested) and e.node == self._node:
            self._interpreter.perform([download_lifecycle.TakePlaced(e.job_id)])
        elif isinstance(e, ev.DownloadCancelRequested):
            job = state.job(e.job_id)
            if job is not None and job.node == self._node:
                self._interpreter.perform([download_lifecycle.CancelPlaced(e.job_id, e.discard)])
        elif isinstance(e, ev.InstanceStopRequested):
            model = state.models.get(recorded.model)
            inst = model.instance if model is not None else None
            if inst is not None and inst.instance_id == e.instance_id and inst.node == self._node:
                self._interpreter.perform([decide.Stop(e.instance_id)])
