"""Human units for the CLI's tables: sizes, durations, ages."""

from __future__ import annotations

from datetime import UTC, datetime


def size(n: int | float | None) -> str:
    """``1.5 GB`` (decimal units, as download sizes are quoted); ``-`` for unknown."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def duration(seconds: float | None) -> str:
    """``850 ms``, ``12.3 s``, ``4m05s``, ``2h03m``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def parse_time(text: str | None) -> datetime | None:
    """An ISO-8601 time from the API (``...Z``), or None."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def when(text: str | None) -> str:
    """A wire time in local time, to the second: ``2026-01-02 13:04:05``."""
    moment = parse_time(text)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def ago(text: str | None, now: datetime | None = None) -> str:
    """``3m12s ago`` for a wire time; ``-`` for none."""
    moment = parse_time(text)
    if moment is None:
        return "-"
    return f"{duration(((now or datetime.now(UTC)) - moment).total_seconds())} ago"
