"""The objects one running service owns: built by :func:`service.startup.start` (the composition
root), handed to the API's providers (:mod:`service.api.deps`) piece by piece, released by
:func:`service.startup.stop`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from service.api.conversations import ConversationOwners
from service.api.metrics import RouterMetrics
from service.catalogue.sources import Catalogue
from service.cluster.node_client import NodeClient
from service.core.server_mode import ROUTER, ServerMode
from service.event_store.async_store import AsyncEventStore
from service.event_store.live_state import LiveState
from service.outside.world import SystemClock
from service.recovery.snapshotter import Snapshotter
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor
from service.supervision.instances import InstanceSupervisor
from service.supervision.interpreter import Interpreter
from service.supervision.model_removal import ModelRemover
from service.supervision.sleep import SleepSnapshots
from service.supervision.startup_loads import StartupLoads
from service.supervision.surroundings import Clock
from service.supervision.worker_logs import WorkerLogs

if TYPE_CHECKING:
    from service.cluster.membership import Membership  # psycopg: only a cluster loads it

IdSource = Callable[[], str]
"""Makes a fresh id each call; injected, so the API never calls ``uuid4`` itself."""

BackgroundTasks = set[asyncio.Task[Any]]
"""Tasks the service started off a request's path; :func:`service.startup.stop` cancels them."""


@dataclass
class ServiceParts:
    settings: Settings
    store: AsyncEventStore
    live: LiveState
    interpreter: Interpreter
    """The one writer: every append of this service goes through it (what the supervisors decide, and facts)."""
    downloads: DownloadSupervisor
    instances: InstanceSupervisor
    remover: ModelRemover
    snapshotter: Snapshotter
    http: httpx.AsyncClient
    metrics: RouterMetrics
    clock: Clock = field(default_factory=SystemClock)
    """The supervisors' clock: the API's "now" agrees with theirs."""
    background: BackgroundTasks = field(default_factory=set)
    catalogue: Catalogue | None = None  # set once the sources were read at start-up
    membership: Membership | None = None  # a cluster node's lock and watch (``--node``)
    warnings: list[str] = field(default_factory=list)  # shown on /health (e.g. an open bind without a key)
    mode: ServerMode = ROUTER  # single-model mode once -m / -hf resolved to one model (start-up)
    snapshots: SleepSnapshots | None = None  # sleeping models' last /props and /metrics
    startup_loads: StartupLoads = field(default_factory=StartupLoads)  # single-model /health's start-up gap
    conversations: ConversationOwners = field(default_factory=ConversationOwners)  # X-Conversation-Id → model
    nodes: NodeClient = field(default_factory=NodeClient)  # requests forwarded to other nodes' services
    worker_logs: WorkerLogs | None = None  # every worker's lines, kept per worker (<home>/logs/workers)
