"""Cutting the requests forwarded to a node once the log says it is lost.

The hop to another node has no read timeout (a generation may take long between
tokens), so a node that vanished without closing its sockets (switched off, cut
off, frozen) would hold those requests forever. The fold decides when that node
is gone (:func:`service.core.cluster.unreachable`: ``node_lost`` for its current
incarnation); this listener only carries it out, through
:meth:`~service.cluster.node_client.NodeClient.abandon`. Each cut request then
ends as one whose node died: a 503 problem with ``reason`` ``node_lost``, or that
error as a stream's last event (``service/api/proxy.py``).
"""

from __future__ import annotations

import structlog

from service.cluster.node_client import NodeClient
from service.core import cluster
from service.core import events as ev
from service.core.state import RouterState

_log = structlog.get_logger(__name__)


class AbandonLost:
    """A LiveState listener that abandons the forwarding connections to each node the fold marks lost."""

    def __init__(self, nodes: NodeClient) -> None:
        self._nodes = nodes

    def on_event(self, recorded: ev.Recorded, state: RouterState) -> None:
        """Cut the requests in flight to the node ``recorded`` ends, if any (the aborted reads raise on
        their tasks' next turn: nothing blocks here)."""
        node = cluster.unreachable(state, recorded)
        if node is None:
            return
        in_flight = self._nodes.abandon(node.url)
        _log.warning("forwarded_requests_abandoned", node=node.name, incarnation=node.incarnation, in_flight=in_flight)
