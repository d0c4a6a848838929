"""``modelrouter migrate-store --from sqlite:///... --to postgresql://...``: copy a log.

Stop the service first (a log that keeps growing during the copy is copied up to where it
was read; run the command again to copy the rest). The copy keeps positions and event ids
(``service/recovery/copy_log.py``), then ``verify`` runs on the target.
"""

from __future__ import annotations

import argparse
import sys

from service.event_store.urls import display_name
from service.recovery.copy_log import CopyRefused, copy_log
from service.recovery.verify import verify_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="source", required=True, help="the log to copy: sqlite:///FILE or postgresql://..."
    )
    parser.add_argument(
        "--to", dest="target", required=True, help="where to: postgresql://user@host/db or sqlite:///FILE"
    )
    parser.add_argument("--no-verify", action="store_true", help="skip `modelrouter verify` on the target afterwards")


def run(args: argparse.Namespace) -> int:
    """Copy, report, verify; exit status 0, 1 (verify failed) or 2 (refused or unreachable)."""
    try:
        report = copy_log(args.source, args.target)
    except (CopyRefused, ValueError) as exc:
        print(f"modelrouter migrate-store: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a database that cannot be reached: the driver says why
        print(f"modelrouter migrate-store: error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    resumed = f" (after {report.already_there} already there)" if report.already_there else ""
    target = display_name(args.target)
    print(f"copied {report.copied} event(s){resumed} to {target}; head {report.head}")
    if args.no_verify:
        return 0
    verified = verify_url(args.target)
    print(verified.render())
    return verified.exit_code
