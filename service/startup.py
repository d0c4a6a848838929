"""Start-up and shut-down of one service instance.

migrate -> quick integrity check -> rebuild the fold (latest snapshot + the
events after it) -> ``router_started`` -> reconcile what the last run left
half-done -> resolve ``-hf``/``-m`` -> list the model sources (caches, models
dir, presets) -> (``node_joined``) -> ``node_devices_measured`` -> resume downloads ->
load-on-startup models -> ``recovery_completed`` -> serve. The devices are measured by a child
process started first of all, side by side with the steps before the loads
(:mod:`service.supervision.node_devices`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import sqlite3
import time
from collections.abc import Sequence

import httpx
import structlog

from service import __version__
from service.api.metrics import Gauges, RouterMetrics
from service.api.parts import ServiceParts
from service.catalogue.hf_source import HfSourceError
from service.catalogue.sources import Catalogue, command_line_model
from service.cluster.lost_nodes import AbandonLost
from service.cluster.remote import RemoteDecisions
from service.core import events as ev
from service.core.cluster import own_view
from service.core.decision import Append
from service.core.server_mode import FAKE_TIMING_WARNING, decide_mode, fake_timing
from service.core.state import DownloadJob
from service.downloads.resolution import warm_up
from service.event_store.async_store import AsyncEventStore
from service.event_store.live_state import LiveState
from service.event_store.rows import LogDiskFull, StoreUnavailable
from service.llamacpp.presets import PresetError
from service.outside.hop_client import hop_client
from service.recovery.migrate import upgrade, upgrade_url
from service.recovery.rebuild import RebuildResult, rebuild_state
from service.recovery.reconcile import elapsed_ms, plan_reconcile
from service.recovery.snapshotter import Snapshotter
from service.settings import Settings
from service.supervision import node_devices
from service.supervision.downloads import DownloadSupervisor
from service.supervision.instances import InstanceSupervisor
from service.supervision.interpreter import Interpreter
from service.supervision.log_files import LogLimits
from service.supervision.model_removal import ModelRemover
from service.supervision.on_demand import OnDemandFiles
from service.supervision.sleep import SleepSnapshots
from service.supervision.surroundings import LoggedSpawn, Surroundings
from service.supervision.worker_logs import WorkerLogs

_log = structlog.get_logger(__name__)


class StartupError(RuntimeError):
    """The service cannot start as configured (an unusable database, a bad preset, an
    ``-hf`` that names nothing); it refuses rather than guess."""


def _quick_check(settings: Settings) -> None:
    if settings.postgres:
        return  # PostgreSQL checks its own pages (data checksums, pg_amcheck: docs/operations.md)
    try:
        with contextlib.closing(sqlite3.connect(settings.db_path)) as conn:
            result = conn.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:  # too damaged to check: "database disk image is malformed"
        result = str(exc)
    if result != "ok":
        msg = f"{settings.db_path} failed PRAGMA quick_check: {result}; run `modelrouter verify`"
        raise StartupError(msg)


async def _open_store(settings: Settings) -> AsyncEventStore:
    """Migrate the log (a SQLite file, or a PostgreSQL database under a lock) and open it."""
    if settings.postgres:
        await asyncio.to_thread(upgrade_url, settings.database_url)
    else:
        await asyncio.to_thread(upgrade, settings.db_path)
    source = {"kind": "router", **({"node": settings.node} if settings.node else {})}
    return AsyncEventStore(settings.store_location, source=source, synchronous=settings.synchronous)


async def _rebuild_checked(settings: Settings, store: AsyncEventStore) -> RebuildResult:
    """The fold rebuilt while ``PRAGMA quick_check`` reads the whole file in a thread: one step of
    C that holds no GIL (~0.4 s at a million events), so it takes the other core instead of adding
    to the start. A damaged file says so (StartupError) before anything the rebuild raised."""
    check = asyncio.ensure_future(asyncio.to_thread(_quick_check, settings))
    try:
        rebuilt = await rebuild_state(store)  # snapshot + tail: start-up does not grow with history
    except BaseException:
        try:
            await check
        except StartupError as damaged:
            raise damaged from None
        except Exception:  # the file's own fault then says nothing more than the rebuild's
            pass
        raise
    await check
    return rebuilt


async def start(settings: Settings) -> ServiceParts:
    """Open the log, rebuild the fold, build the supervisors, recover what the last run left, then
    read the model sources, resume downloads and load ``load-on-startup`` models (docs/architecture.md)."""
    started = time.perf_counter()
    # First of all: the child overlaps the migration, the rebuild and the sources' listing (see the module).
    measuring = asyncio.ensure_future(node_devices.measure(settings.worker_environment()))
    try:
        return await _start(settings, started, measuring)
    except BaseException:
        measuring.cancel()  # the child is killed: nothing outlives a start that failed
        await asyncio.gather(measuring, return_exceptions=True)
        raise


async def _start(
    settings: Settings, started: float, measuring: asyncio.Future[node_devices.Measurement]
) -> ServiceParts:
    settings.home.mkdir(parents=True, exist_ok=True)
    settings.cache_dir.mkdir(parents=True, exist_ok=True)
    store = await _open_store(settings)
    rebuilt = await _rebuild_checked(settings, store)
    live = LiveState(store, state=rebuilt.state, wakeups=settings.tail_wakeups)
    snapshotter = Snapshotter(store, every=settings.snapshot_every, last_position=rebuilt.snapshot_position)
    live.add_listener(snapshotter.on_folded)
    await live.start()
    replayed = rebuilt.events_replayed + live.events_applied
    snapshotter.maybe_snapshot(live.state)  # a long replay gets a fresh snapshot at once
    runtime = _compose(settings, store, live, snapshotter)
    router_started = ev.RouterStarted(pid=os.getpid(), version=__version__, host=settings.host, port=settings.port)
    await runtime.interpreter.record([Append(router_started)])
    warning = binding_warning(settings)
    if warning is not None:
        runtime.warnings.append(warning)
        _log.warning("insecure_binding", detail=warning)
    plan = await asyncio.to_thread(plan_reconcile, own_view(live.state, settings.node), settings.cache_dir)
    if plan.events:
        await runtime.interpreter.record(plan.events)  # first: no instance of the last run is left when models go
    runtime.catalogue = await _catalogue(settings, runtime)
    single = runtime.catalogue.single
    runtime.mode = decide_mode(single.name, single.aliases) if single is not None else decide_mode(None)
    runtime.instances.mode = runtime.mode  # before any load: the one model's worker answers under its id
    if runtime.worker_logs is not None:  # before any load: the one model's lines are forwarded bare
        runtime.worker_logs.mode = runtime.mode
    runtime.instances.fake_timing = fake_timing(runtime.mode, settings.fake_timing)  # before any load
    if runtime.instances.fake_timing:
        runtime.warnings.append(FAKE_TIMING_WARNING)
    if settings.node is not None:
        await _join(runtime, settings.node)
    # Before the first load, so that placement reads this node's devices (a failure records none: a warning).
    measured = node_devices.logged(await measuring, settings.node)
    await runtime.interpreter.record([Append(measured.event(settings.node))])
    resumed = await _resume_and_load(runtime, plan.interrupted)
    completed = ev.RecoveryCompleted(
        interrupted_downloads=len(plan.interrupted),
        resumed_downloads=resumed,
        lost_instances=plan.lost_instances,
        orphans=plan.orphans,
        events_replayed=replayed,
        snapshot_position=rebuilt.snapshot_position,
        duration_ms=elapsed_ms(started),
    )
    await runtime.interpreter.record([Append(completed)])
    warm = asyncio.create_task(asyncio.to_thread(warm_up), name="hub-client-warm-up")
    runtime.background.add(warm)
    _log.info("service_ready", position=live.position, replayed=replayed, duration_ms=completed.duration_ms)
    return runtime


def _compose(settings: Settings, store: AsyncEventStore, live: LiveState, snapshotter: Snapshotter) -> ServiceParts:
    """The composition root: the interpreter, the supervisors over it, metrics, the HTTP client."""
    interpreter = Interpreter(live)  # the one writer: every append of this service goes through it
    limits = LogLimits(settings.worker_log_max_bytes, settings.worker_log_backups, settings.worker_log_budget_bytes)
    worker_logs = WorkerLogs(
        settings.home, limits=limits, secrets=settings.secrets(), max_pending=settings.worker_log_max_pending
    )
    surroundings = Surroundings(
        spawn=LoggedSpawn(worker_logs)
    )  # each worker's lines: the service's log and its own file
    downloads = DownloadSupervisor(settings, live, surroundings, interpreter=interpreter)
    files = OnDemandFiles(settings, live, downloads)
    http = hop_client(
        # llama-server's -to/--timeout on the hop to the workers, as its router applies it to its children.
        httpx.Timeout(10.0, read=settings.timeout, write=settings.timeout, pool=None),
        httpx.Limits(max_connections=256, max_keepalive_connections=64),
        auth=surroundings.worker_keys,  # every request to one of our workers carries its secret
    )
    snapshots = SleepSnapshots(http)
    instances = InstanceSupervisor(
        settings, live, surroundings, interpreter=interpreter, files=files, snapshots=snapshots
    )
    # Added after the catch-up: event counters count from this process's start.
    gauges = Gauges(
        in_flight=lambda: sum(instances.busy.values()),
        queued=lambda: instances.queue_length,
        busy=lambda: instances.busy,
    )
    metrics = RouterMetrics(lambda: live.state, gauges)
    live.add_listener(metrics.on_folded)
    return ServiceParts(
        settings=settings,
        store=store,
        live=live,
        interpreter=interpreter,
        downloads=downloads,
        instances=instances,
        remover=ModelRemover(live, interpreter, instances, downloads, settings.cache_dir),
        snapshotter=snapshotter,
        http=http,
        metrics=metrics,
        clock=instances.fx.clock,
        snapshots=snapshots,
        worker_logs=worker_logs,
    )


async def _join(runtime: ServiceParts, node: str) -> None:
    """Take this node's lock, append ``node_joined`` with what it holds, watch the other nodes,
    carry out what they decide for this one, and cut the requests forwarded to a lost one
    (docs/cluster.md)."""
    from service.cluster.membership import Membership  # psycopg: only a cluster loads it

    membership = Membership(runtime.settings, runtime.live, runtime.interpreter, runtime.instances, runtime.downloads)
    await membership.join()
    runtime.membership = membership
    runtime.live.add_listener(RemoteDecisions(node, runtime.interpreter, runtime.instances.free_port).on_event)
    runtime.live.add_listener(AbandonLost(runtime.nodes).on_event)  # no forwarded request outlives its node
    watch = asyncio.create_task(membership.watch(), name="node-watch")
    runtime.background.add(watch)


async def _resume_and_load(runtime: ServiceParts, interrupted: Sequence[DownloadJob]) -> int:
    """Resume the downloads the last run left (unless told not to), start the instance supervisor,
    load ``load-on-startup`` models; returns how many downloads were resumed."""
    resumed = 0
    if runtime.settings.resume_downloads_on_start:
        for job in interrupted:
            await runtime.downloads.resume(job, runtime.settings.hf_endpoint)
            resumed += 1
    supervisor = asyncio.create_task(runtime.instances.run(), name="instance-supervisor")
    runtime.background.add(supervisor)
    loads, state = runtime.startup_loads, runtime.live.state
    runtime.live.add_listener(loads.on_event)  # before the loads: a fast one's instance_ready is seen
    loads.expect([m.name for m in state.models.values() if m.config.load_on_startup and m.listed], state)
    loads.retain(await runtime.instances.load_on_startup())  # one refused is not owed
    return resumed


def binding_warning(settings: Settings) -> str | None:
    """Issue 11 §4: listening beyond loopback with no API key lets anyone on the network
    load models, download files and delete them. Said loudly at start and on /health."""
    if settings.api_keys:
        return None
    open_hosts = [h for h in settings.hosts if not _local(h)]
    if not open_hosts:
        return None
    return (
        f"listening on {', '.join(open_hosts)}, beyond loopback, without an API key: anyone who can reach "
        "this port can download, load and delete models; set --api-key or LLAMA_API_KEY"
    )


def _local(host: str) -> bool:
    """Loopback, or a UNIX socket (reachable through the file system's permissions only)."""
    host = host.strip("[]")
    if host == "localhost" or host.endswith(".sock"):
        return True
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return False


async def _catalogue(settings: Settings, runtime: ServiceParts) -> Catalogue:
    """Resolve ``-hf``/``-m`` first (a preset repo makes a router, the seed's regression),
    then list every source. A bad preset, or an ``-hf`` that names nothing, stops the start."""
    try:
        remote, single = await asyncio.to_thread(command_line_model, settings)
        catalogue = Catalogue(
            settings, runtime.live, runtime.interpreter, runtime.instances, remote=remote, single=single
        )
        await catalogue.refresh(reload=False)
    except (PresetError, HfSourceError) as exc:
        raise StartupError(str(exc)) from None
    if remote is not None:
        _log.warning(
            "remote_preset",
            repo=remote.repo,
            path=str(remote.path),
            note="using preset.ini from a Hub repo: only use presets you trust",
        )
    on_startup = [m.name for m in runtime.live.state.models.values() if m.config.load_on_startup and m.listed]
    if 0 < settings.models_max < len(on_startup):
        msg = f"{len(on_startup)} models to load on startup ({', '.join(sorted(on_startup))}) exceed --models-max"
        raise StartupError(f"{msg} {settings.models_max}")
    return catalogue


async def stop(runtime: ServiceParts) -> None:
    """SIGTERM/SIGINT path: stop children cleanly, then record ``router_stopped``."""
    try:
        await runtime.instances.shutdown()
    except (LogDiskFull, StoreUnavailable) as exc:
        # Its stop could not be recorded, so it was not performed: the inference workers end with this
        # process (PR_SET_PDEATHSIG, stdin EOF) recording nothing, and the next start records them lost.
        _log.error("shutdown_not_recorded", error=str(exc))
    await runtime.downloads.shutdown()
    await runtime.interpreter.close()  # effects still running, and request_completed appends
    for task in list(runtime.background):
        task.cancel()
    await asyncio.gather(*runtime.background, return_exceptions=True)
    # Appended without waiting for the tail: nothing reads it back, and a shutdown
    # must record it even while the tail is down. A node says it left in the same append, while its
    # lock is still held: the others then never record it lost (docs/cluster.md).
    last = [Append(ev.RouterStopped(pid=os.getpid(), reason="shutdown"))]
    leaving = runtime.membership.leaving() if runtime.membership is not None else None
    if leaving is not None:
        last.append(leaving)
    try:
        await runtime.interpreter.record_unread(last)
    except (LogDiskFull, StoreUnavailable) as exc:  # a full disk, PostgreSQL down: the next start reconciles
        _log.error("router_stopped_not_recorded", error=str(exc))
    await runtime.snapshotter.snapshot_now(runtime.live.state)
    await runtime.snapshotter.close()
    await runtime.http.aclose()
    await runtime.nodes.aclose()
    if runtime.worker_logs is not None:
        await asyncio.to_thread(runtime.worker_logs.close)  # the workers' last lines, written
    await runtime.live.stop()
    if runtime.membership is not None:
        await runtime.membership.close()
    await runtime.store.close()
    _log.info("router_stopped")
