"""What the commands over the HTTP API print for people: tables, times and ages, and notes on
stderr (stdout stays the answer)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime


def note(message: str) -> None:
    """A line for the person, on stderr: stdout stays the answer (a table, JSON)."""
    print(message, file=sys.stderr)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, the last one not padded."""
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    )


def now() -> datetime:
    """The time ages are measured to (a test replaces it)."""
    return datetime.now(UTC)


def age(since: str | None) -> str:
    """How long ago ``since`` (ISO 8601) was (:func:`duration`); ``-`` when there is none."""
    if not since:
        return "-"
    return duration((now() - datetime.fromisoformat(since)).total_seconds())


def duration(seconds: float) -> str:
    """Seconds in their largest unit, rounded down: ``42s``, ``5m``, ``3h``, ``12d``."""
    whole = max(0, int(seconds))
    for unit, size, up_to in (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800)):
        if whole < up_to:
            return f"{whole // size}{unit}"
    return f"{whole // 86400}d"


def when(value: str | None) -> str:
    """An ISO 8601 time as ``2026-11-29 10:00:03 UTC``; ``-`` when there is none."""
    if not value:
        return "-"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC)
    return parsed.strftime("%Y-%m-%d %H:%M:%S UTC")
