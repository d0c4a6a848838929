"""``modelrouter verify``: is this data directory sound?

Checks, each reported OK/FAIL (or SKIP/WARN, which do not fail the run):

* ``integrity``   SQLite's ``PRAGMA integrity_check`` (PostgreSQL checks its own pages);
* ``append_only`` the triggers refusing UPDATE/DELETE (and on PostgreSQL TRUNCATE) exist;
* ``positions``   positions run 1..head with no gap (a gap means lost history);
* ``parse``       every event decodes under the current upcasters;
* ``fold``        the fold runs over the whole log;
* ``snapshots``   each current-version snapshot equals the replay up to its position;
* ``files``       finished downloads' files exist with the recorded size
                  (and sha256 with ``--deep``);
* ``prompt_cache`` saved prompt-cache files exist with the recorded size; files the log does not
                  know and ``*.tmp-*`` leftovers are listed (WARN).

One read-only pass over the log serves the position, parse, fold and snapshot
checks, so verifying a million events costs one replay. Exit status: 0 when no
check failed, 1 when one did, 2 when the database cannot be opened. The log is a
SQLite file or a PostgreSQL database (``verify_db.py`` answers the questions that differ).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from service.core import events as ev
from service.core.fold import fold
from service.core.prompt_cache import DIR_NAME
from service.core.snapshot import FOLD_VERSION
from service.core.state import RouterState
from service.event_store.codec import decode_rows, to_recorded
from service.event_store.snapshots import decode_state
from service.event_store.urls import is_postgres, redacted, sqlite_path
from service.recovery.files import FileFindings, check_model_files
from service.recovery.prompt_cache_files import check_prompt_cache
from service.recovery.verify_db import LogDatabase, PostgresLog, SqliteLog

OK, FAIL, WARN, SKIP = "OK", "FAIL", "WARN", "SKIP"
_PAGE = 5000
_MAX_ITEMS = 20  # per check; the count says how many more there were


class CheckJSON(TypedDict):
    name: str
    status: str
    detail: str
    items: list[str]


class ReportJSON(TypedDict):
    """``modelrouter verify --json``."""

    db: str
    deep: bool
    ok: bool
    checks: list[CheckJSON]


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: str
    detail: str
    items: tuple[str, ...] = ()
    """Problems for a FAIL, notes otherwise (capped at 20 plus a count)."""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    db_path: str
    deep: bool
    checks: tuple[CheckResult, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    @property
    def exit_code(self) -> int:
        if any(c.name == "database" and c.status == FAIL for c in self.checks):
            return 2
        return 0 if self.ok else 1

    def render(self) -> str:
        """One line per check, problems and notes indented below it."""
        lines = [f"modelrouter verify: {self.db_path}{' (deep)' if self.deep else ''}"]
        for check in self.checks:
            lines.append(f"{check.status:<5} {check.name:<12} {check.detail}")
            lines.extend(f"        - {item}" for item in check.items)
        failed = [c.name for c in self.checks if c.status == FAIL]
        lines.append(f"FAILED: {', '.join(failed)}" if failed else "all checks passed")
        return "\n".join(lines)

    def to_json(self) -> ReportJSON:
        return {
            "db": self.db_path,
            "deep": self.deep,
            "ok": self.ok,
            "checks": [
                {"name": c.name, "status": c.status, "detail": c.detail, "items": list(c.items)} for c in self.checks
            ],
        }


def _capped(items: Sequence[str]) -> tuple[str, ...]:
    if len(items) <= _MAX_ITEMS:
        return tuple(items)
    return (*items[:_MAX_ITEMS], f"... and {len(items) - _MAX_ITEMS} more")


def _integrity(db: LogDatabase) -> CheckResult:
    ok, detail, problems = db.integrity()
    return CheckResult("integrity", OK if ok else FAIL, detail, _capped(problems))


def _append_only(db: LogDatabase) -> CheckResult:
    present = db.triggers()
    missing = [t for t in db.triggers_expected if t not in present]
    if missing:
        return CheckResult("append_only", FAIL, f"missing trigger(s): {', '.join(missing)}")
    return CheckResult("append_only", OK, f"triggers {', '.join(db.triggers_expected)} present")


@dataclass
class _Snap:
    id: int
    position: int
    state: RouterState


@dataclass
class _Scan:
    """Accumulators of the single pass over the log."""

    state: RouterState = field(default_factory=RouterState)
    count: int = 0
    expected: int = 1
    gaps: list[tuple[int, int]] = field(default_factory=list)
    parse_problems: list[str] = field(default_factory=list)
    upcast: int = 0
    fold_problems: list[str] = field(default_factory=list)
    snap_problems: list[str] = field(default_factory=list)
    snap_notes: list[str] = field(default_factory=list)
    snaps_checked: int = 0
    pending: list[_Snap] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)
    """model -> type of the last event that set its files (only download_finished is checked)."""


_FILE_EVENTS = {ev.DownloadFinished.TYPE, ev.ModelDiscovered.TYPE, ev.ModelRemoved.TYPE}


def _load_snapshots(db: LogDatabase, scan: _Scan, head: int) -> bool:
    """Queue current-version snapshots for comparison; False if there is no table."""
    if not db.has_table("snapshots"):
        return False
    rows = db.query(db.snapshot_sql)
    for row_id, position, version, text in rows:
        where = f"snapshot #{row_id} at {position}"
        if version != FOLD_VERSION:
            scan.snap_notes.append(f"{where}: fold_version {version} (current {FOLD_VERSION}), ignored at startup")
            continue
        if position > head:
            scan.snap_problems.append(f"{where}: beyond the log's head {head}")
            continue
        try:
            state = decode_state(text)
        except Exception as exc:
            scan.snap_problems.append(f"{where}: does not decode ({type(exc).__name__}: {exc})")
            continue
        scan.pending.append(_Snap(int(row_id), int(position), state))
    return True


def _compare(scan: _Scan, snap: _Snap) -> None:
    scan.snaps_checked += 1
    if snap.state == scan.state:
        return
    differing = [
        name
        for name in ("position", "models", "job_index", "router_pid", "router_started_at", "partial_files")
        if getattr(snap.state, name) != getattr(scan.state, name)
    ]
    models = sorted(
        m for m in {*snap.state.models, *scan.state.models} if snap.state.models.get(m) != scan.state.models.get(m)
    )
    detail = f"; models {', '.join(models[:5])}" if models else ""
    scan.snap_problems.append(
        f"snapshot #{snap.id} at {snap.position} differs from replay in {', '.join(differing)}{detail}"
    )


def _decode_page(rows: list[tuple[Any, ...]], scan: _Scan) -> list[ev.Recorded]:
    try:
        return decode_rows(rows)
    except Exception:  # find the bad rows one by one; keep the good ones
        good: list[ev.Recorded] = []
        for row in rows:
            try:
                good.append(to_recorded(row))
            except Exception as exc:
                scan.parse_problems.append(f"position {row[0]}: {row[2]} v{row[3]}: {type(exc).__name__}: {exc}")
        return good


def _scan_page(rows: list[tuple[Any, ...]], scan: _Scan) -> None:
    for row in rows:
        position, type_, version = row[0], row[2], row[3]
        if position != scan.expected:
            scan.gaps.append((scan.expected, position - 1))
        scan.expected = position + 1
        cls = ev.EVENT_TYPES.get(type_)
        if cls is not None and isinstance(version, int) and version < cls.VERSION:
            scan.upcast += 1
    scan.count += len(rows)
    for recorded in _decode_page(rows, scan):
        while scan.pending and recorded.position > scan.pending[0].position:
            _compare(scan, scan.pending.pop(0))
        if recorded.type in _FILE_EVENTS and recorded.model is not None:
            scan.origins[recorded.model] = recorded.type
        try:
            scan.state = fold(scan.state, recorded)
        except Exception as exc:
            scan.fold_problems.append(f"position {recorded.position}: {recorded.type}: {type(exc).__name__}: {exc}")


def _positions_check(db: LogDatabase, scan: _Scan, head: int) -> CheckResult:
    gaps = list(scan.gaps)
    handed_out = db.handed_out()
    if handed_out is not None and handed_out > head:
        gaps.append((head + 1, handed_out))  # the newest events were removed
    if not gaps:
        return CheckResult("positions", OK, f"{scan.count} events, positions 1..{head} contiguous")
    missing = sum(b - a + 1 for a, b in gaps)
    items = [f"missing {a}" if a == b else f"missing {a}..{b} ({b - a + 1})" for a, b in gaps]
    return CheckResult("positions", FAIL, f"{len(gaps)} gap(s), {missing} position(s) missing", _capped(items))


def _scan_checks(db: LogDatabase, deep: bool, cache_root: Path | None) -> list[CheckResult]:
    head = int(db.query("SELECT COALESCE(MAX(position), 0) FROM events")[0][0])
    scan = _Scan()
    has_snapshots = _load_snapshots(db, scan, head)
    after = -(2**63)
    while True:
        rows = db.query(db.page_sql, (after, _PAGE))
        if not rows:
            break
        _scan_page(rows, scan)
        after = rows[-1][0]
    for snap in scan.pending:
        _compare(scan, snap)
    checks = [_positions_check(db, scan, head)]
    parse_detail = f"{scan.count - len(scan.parse_problems)}/{scan.count} events decode"
    parse_detail += f" ({scan.upcast} upcast from older schema versions)" if scan.upcast else ""
    if scan.parse_problems:
        checks.append(CheckResult("parse", FAIL, parse_detail, _capped(scan.parse_problems)))
    else:
        checks.append(CheckResult("parse", OK, parse_detail))
    models = len(scan.state.models)
    fold_detail = f"fold reached position {scan.state.position}: {models} model(s), {len(scan.state.job_index)} job(s)"
    if scan.fold_problems:
        checks.append(CheckResult("fold", FAIL, fold_detail, _capped(scan.fold_problems)))
    else:
        checks.append(CheckResult("fold", OK, fold_detail))
    if not has_snapshots:
        checks.append(CheckResult("snapshots", SKIP, "no snapshots table"))
    else:
        detail = (
            f"{scan.snaps_checked} snapshot(s) of fold_version {FOLD_VERSION} equal the replay"
            if scan.snaps_checked
            else f"no snapshot of fold_version {FOLD_VERSION} stored (startup replays the whole log)"
        )
        if scan.snap_problems:
            items = _capped(scan.snap_problems + scan.snap_notes)
            checks.append(CheckResult("snapshots", FAIL, f"{len(scan.snap_problems)} bad snapshot(s)", items))
        else:
            checks.append(CheckResult("snapshots", OK, detail, _capped(scan.snap_notes)))
    checks.append(_files_check(scan, deep))
    if cache_root is not None:
        checks.append(_prompt_cache_check(scan, cache_root))
    return checks


def _prompt_cache_check(scan: _Scan, root: Path) -> CheckResult:
    found = check_prompt_cache(scan.state, root)
    detail = f"{found.files} saved file(s), {found.bytes} bytes, under {root}"
    if found.problems:
        items = _capped(found.problems + found.notes)
        return CheckResult("prompt_cache", FAIL, f"{len(found.problems)} problem(s); {detail}", items)
    return CheckResult("prompt_cache", WARN if found.notes else OK, detail, _capped(found.notes))


def _files_check(scan: _Scan, deep: bool) -> CheckResult:
    found = FileFindings()
    for name, model in sorted(scan.state.models.items()):
        if model.available and scan.origins.get(name) == ev.DownloadFinished.TYPE:
            check_model_files(name, model.files, deep=deep, out=found)
    how = f"size and sha256 ({found.hashed} hashed)" if deep else "existence and size (sha256 with --deep)"
    detail = f"{found.files} file(s) of {found.models} downloaded model(s): {how}"
    if found.problems:
        return CheckResult(
            "files", FAIL, f"{len(found.problems)} problem(s); {detail}", _capped(found.problems + found.notes)
        )
    return CheckResult("files", OK, detail, _capped(found.notes))


def verify(db_path: Path, *, deep: bool = False, cache_root: Path | None = None) -> VerifyReport:
    """Run every check on the SQLite log at ``db_path`` (read-only) and report; ``cache_root``: the
    service's ``<home>/prompt-cache`` (None: its prompt cache is not checked)."""
    db_path = Path(db_path)
    if not db_path.is_file():
        return VerifyReport(str(db_path), deep, (CheckResult("database", FAIL, "not found"),))
    return _verify(str(db_path), lambda: SqliteLog(db_path), deep, cache_root)


def verify_url(url: str, *, deep: bool = False, cache_root: Path | None = None) -> VerifyReport:
    """:func:`verify` for the log a database URL names (a ``sqlite:///`` file, or PostgreSQL)."""
    if not is_postgres(url):
        return verify(sqlite_path(url), deep=deep, cache_root=cache_root)
    return _verify(redacted(url), lambda: PostgresLog(url), deep, cache_root)


def _verify(name: str, open_db: Callable[[], LogDatabase], deep: bool, cache_root: Path | None) -> VerifyReport:
    try:
        db = open_db()
    except Exception as exc:  # sqlite3.Error, psycopg.Error: the message says which
        return VerifyReport(name, deep, (CheckResult("database", FAIL, f"cannot open: {exc}"),))
    try:
        checks = [_integrity(db)]
        if not db.has_table("events"):
            checks.append(CheckResult("database", FAIL, "no events table (not a modelrouter database?)"))
            return VerifyReport(name, deep, tuple(checks))
        checks.append(_append_only(db))
        checks.extend(_scan_checks(db, deep, cache_root))
    except sqlite3.DatabaseError as exc:  # a damaged file can fail mid-read
        checks.append(CheckResult("database", FAIL, f"read failed: {exc}"))
    finally:
        db.close()
    return VerifyReport(name, deep, tuple(checks))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``verify`` flags, for ``service.cli`` to attach to its subparser."""
    parser.add_argument("--home", type=Path, help="data dir (MODELROUTER_HOME)")
    parser.add_argument("--db", type=Path, help="database file (default <home>/modelrouter.db)")
    parser.add_argument("--database-url", help="sqlite:///FILE or postgresql://... (MODELROUTER_DATABASE_URL)")
    parser.add_argument("--deep", action="store_true", help="also hash downloaded files (reads every byte)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Verify per parsed ``args``, print the report, return the exit status."""
    db_path = getattr(args, "db", None)
    if db_path is not None:  # the prompt cache lies in --home, else beside the file
        home = args.home if args.home is not None else Path(db_path).parent
        report = verify(db_path, deep=bool(args.deep), cache_root=home / DIR_NAME)
    else:
        from service.settings import Settings  # only when needed: reads the environment

        settings = Settings.from_env(home=args.home, database_url=getattr(args, "database_url", None))
        report = verify_url(settings.database_url, deep=bool(args.deep), cache_root=settings.home / DIR_NAME)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.render())
    return report.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m service.recovery.verify [--home DIR] [--db FILE] [--deep] [--json]``."""
    parser = argparse.ArgumentParser(
        prog="modelrouter verify",
        description="Check the event log, snapshots, downloaded files and saved prompt caches.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
