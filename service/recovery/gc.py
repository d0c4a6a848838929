"""``modelrouter gc``: delete partial downloads that no job in the log refers to.

Start-up only *reports* such files (``partial_file_found``): deleting bytes a
user may still want is a decision for a person. Partials of failed, cancelled
or interrupted jobs are kept: a later request resumes them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from service.core import events as ev
from service.core.fold import replay
from service.downloads.cache_files import find_partials
from service.event_store.codec import NewEvent
from service.event_store.statements import EventFilter
from service.event_store.sync_store import SyncEventStore
from service.recovery.migrate import upgrade_url
from service.recovery.reconcile import referenced_blobs
from service.settings import Settings


@dataclass(frozen=True, slots=True)
class Orphan:
    path: Path
    bytes: int


def find_orphans(store: SyncEventStore, cache_dir: Path) -> list[Orphan]:
    """Partial files whose blob no download job names."""
    events, after = [], 0
    while page := store.read(EventFilter(after=after, limit=1000)):
        events.extend(page)
        after = page[-1].position
    known = referenced_blobs(replay(events))
    return [
        Orphan(path, path.stat().st_size)
        for path in find_partials(cache_dir)
        if path.name.removesuffix(".incomplete") not in known
    ]


def collect(settings: Settings, *, dry_run: bool) -> list[Orphan]:
    """Delete (unless ``dry_run``) and record each orphan; returns them."""
    upgrade_url(settings.database_url)
    store = SyncEventStore(settings.store_location, source={"kind": "gc"}, synchronous=settings.synchronous)
    try:
        orphans = find_orphans(store, settings.cache_dir)
        if not dry_run:
            for orphan in orphans:
                orphan.path.unlink(missing_ok=True)
                store.append([NewEvent(ev.PartialFileRemoved(path=str(orphan.path), bytes=orphan.bytes))])
        return orphans
    finally:
        store.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--home", type=Path, help="data dir (MODELROUTER_HOME)")
    parser.add_argument("--database-url", help="sqlite:///FILE or postgresql://... (MODELROUTER_DATABASE_URL)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted")


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env(home=args.home, database_url=getattr(args, "database_url", None))
    orphans = collect(settings, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    for orphan in orphans:
        print(f"{verb} {orphan.path} ({orphan.bytes} bytes)")
    print(f"{len(orphans)} orphan partial file(s), {sum(o.bytes for o in orphans)} bytes {verb}")
    return 0
