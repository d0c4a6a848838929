"""The download worker: one process per download job (``python -m workers.download``, see ``_cli``).

* ``_cli``: the command line, the signal-first start, the exit codes.
* ``_job``: one job: lock, check, fetch every blob, publish into the HF cache, report.
* ``_transfer``: one blob over HTTP into a resumable, verified partial file, with retries.
* ``_http_client``: the stdlib GET client of the byte path (redirects, proxies, TLS).
* ``_partial_file``: the partial blob, hashed behind the writes by a second thread.
* ``_hf_cache``: the Hugging Face cache layout as the worker writes it (locks, blobs, snapshots).
* ``_interrupts``: cancels and parent death, turned into :class:`Interrupted` at safe points.

Exports load lazily: ``python -m workers.download`` imports this package first, and the
worker installs its signal handlers before anything slow is imported (see ``_cli``); plain
imports here would put ~90 ms before them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workers import lazy_exports

if TYPE_CHECKING:  # the real types for mypy; at run time each name loads on first use (__getattr__)
    from workers.download._cli import build_parser, main
    from workers.download._interrupts import CANCEL, DISCARD, PARENT, Interrupted, Interrupts
    from workers.download._job import load_spec, run_job
    from workers.download._partial_file import DiskFull, PartialFile
    from workers.download._transfer import ProgressMeter, TransferConfig, TransferError, fetch_blob

__all__ = [
    "CANCEL",
    "DISCARD",
    "PARENT",
    "DiskFull",
    "Interrupted",
    "Interrupts",
    "PartialFile",
    "ProgressMeter",
    "TransferConfig",
    "TransferError",
    "build_parser",
    "fetch_blob",
    "load_spec",
    "main",
    "run_job",
]

_HOMES = {
    "build_parser": "workers.download._cli",
    "main": "workers.download._cli",
    "CANCEL": "workers.download._interrupts",
    "DISCARD": "workers.download._interrupts",
    "PARENT": "workers.download._interrupts",
    "Interrupted": "workers.download._interrupts",
    "Interrupts": "workers.download._interrupts",
    "load_spec": "workers.download._job",
    "run_job": "workers.download._job",
    "DiskFull": "workers.download._partial_file",
    "PartialFile": "workers.download._partial_file",
    "ProgressMeter": "workers.download._transfer",
    "TransferConfig": "workers.download._transfer",
    "TransferError": "workers.download._transfer",
    "fetch_blob": "workers.download._transfer",
}

__getattr__ = lazy_exports(__name__, _HOMES)
