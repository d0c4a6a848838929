"""A tailer process: follows the log and writes every position it sees, one per line."""

from __future__ import annotations

import argparse
import sys
import time

from service.event_store.sync_store import SyncEventStore


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    store = SyncEventStore(args.db, source={"kind": "test_tailer"})
    deadline = time.monotonic() + args.timeout
    seen = [0]  # a cell the stop predicate reads as the loop advances
    with open(args.out, "w") as out:
        for recorded in store.tail(0, stop=lambda: seen[0] >= args.expect or time.monotonic() > deadline):
            out.write(f"{recorded.position} {recorded.event_id}\n")
            seen[0] += 1
    return 0 if seen[0] >= args.expect else 1


if __name__ == "__main__":
    sys.exit(main())
