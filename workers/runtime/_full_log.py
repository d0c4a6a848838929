"""What a worker does when the log's disk is full (its append raised ``LogDiskFull``).

A worker states facts the service folds, so the two kinds of event are treated differently:

* **Progress** (``download_progress``, ``loading_progress``, ``instance_stats``) only refines
  what a later event says again: skipped while the disk is full, with one log line per outage.
* **Every other event** (started, ready, finished, failed, stopped...) is a lifecycle fact: never
  dropped. The worker keeps it and retries its append, waiting 0.25 s, then twice as long
  each time up to 5 s, until it lands, so a download that finishes meanwhile is recorded
  ``download_finished`` once space is freed. The retries end only when the service is gone
  (its recovery then records the outcome, ``download_interrupted`` or ``instance_lost``); an
  inference worker told to stop meanwhile is ended by its own stop deadline, and the service
  records its exit.

So a full log disk is never a crash (which the restart policy would turn into a crash loop)
and never a lost terminal event; the worker's stderr says what it waits for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from service.core import events as ev
from service.event_store.rows import FULL_RETRY_CAP_S, FULL_RETRY_FIRST_S, LogDiskFull
from workers.runtime._log import WorkerLog

PROGRESS_EVENTS: frozenset[type[ev.Event]] = frozenset({ev.DownloadProgress, ev.LoadingProgress, ev.InstanceStats})
"""Skipped while the log's disk is full: a later event carries the same facts."""


class FullLogPolicy:
    """Emits through ``write`` (the sink's durable append), applying the module's rules on a full disk."""

    def __init__(self, log: WorkerLog, service_gone: Callable[[], bool], sleep: Callable[[float], None] = time.sleep):
        self.log = log
        self.service_gone = service_gone
        self.sleep = sleep
        self._skipping = False  # progress skipped since the last append that landed

    def emit(self, write: Callable[[], None], event: ev.Event) -> None:
        """``write()`` once; on a full disk skip a progress ``event``, or retry any other until it lands."""
        try:
            write()
        except LogDiskFull as exc:
            if type(event) in PROGRESS_EVENTS:
                if not self._skipping:
                    self.log.warning("event_skipped_log_full", type=event.TYPE, detail=str(exc))
                self._skipping = True
                return
            self._retry(write, event, exc)
        self._skipping = False

    def _retry(self, write: Callable[[], None], event: ev.Event, first: LogDiskFull) -> None:
        began, delay, attempts = time.monotonic(), FULL_RETRY_FIRST_S, 1
        self.log.error("log_disk_full", type=event.TYPE, detail=str(first), retry="until it lands")
        while True:
            if self.service_gone():
                self.log.error("event_not_recorded", type=event.TYPE, reason="the service is gone", attempts=attempts)
                raise first
            self.sleep(delay)
            attempts += 1
            try:
                write()
            except LogDiskFull:
                delay = min(delay * 2, FULL_RETRY_CAP_S)
                continue
            waited = round(time.monotonic() - began, 2)
            self.log.info("log_writable_again", type=event.TYPE, attempts=attempts, waited_s=waited)
            return
