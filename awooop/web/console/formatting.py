"""Display helpers: the template filters for times, waits and JSON, and the step journal
as timeline rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from awooop.web.console.base import blueprint


@blueprint.app_template_filter("when")
def when(value: Any) -> str:
    """A time as ``2026-11-29 10:00:03 UTC`` (journal entries keep theirs as strings)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


@blueprint.app_template_filter("duration")
def duration(value: timedelta | None) -> str:
    """A wait as people say it: ``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 4 h``."""
    if value is None:
        return ""
    seconds = max(0, int(value.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60:02d} min"
    return f"{hours // 24} d {hours % 24} h"


@blueprint.app_template_filter("pretty")
def pretty(value: Any) -> str:
    """JSON for people (a plain string, so autoescaping applies)."""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


@blueprint.app_template_filter("compact")
def compact(value: Any) -> str:
    """JSON on one line (a plain string, so autoescaping applies)."""
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


_JOURNAL_COLUMNS = ("recorded_at", "phase", "step", "status", "decision", "attempt", "error")


def timeline(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step journal as rows: when, phase, step, outcome, attempt, error, and the rest of
    the entry (output, plan, ids) for a closer look."""
    rows = []
    for entry in journal:
        rest = {k: v for k, v in entry.items() if k not in _JOURNAL_COLUMNS}
        rows.append(
            {
                "at": entry.get("recorded_at"),
                "phase": entry.get("phase", ""),
                "step": entry.get("step", ""),
                "outcome": entry.get("status") or entry.get("decision") or "",
                "attempt": entry.get("attempt", ""),
                "error": entry.get("error") or "",
                "rest": rest,
            }
        )
    return rows
