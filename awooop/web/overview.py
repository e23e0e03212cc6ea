"""The console's overview page, as data for its template: runs by status now, the chart of
runs finished per minute with their failure codes, the intervention queue and the outbox
backlog — each number with the run-list address that shows its runs.

The chart is an inline SVG the template draws from :class:`Chart`: every coordinate is
computed here, colours come from classes in ``console.css`` (the CSP allows no inline style
and no script). Each bar segment links to the runs it counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from awooop.domain import states
from awooop.store import overview as store

# Distinct failure codes drawn in colours of their own; the rest share one.
CODE_COLOURS = 4
# Chart geometry (SVG user units; the SVG scales to the page width).
WIDTH, HEIGHT = 960, 250
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 14, 30
_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360)

RunsUrl = Callable[..., str]


def _query_time(value: datetime) -> str:
    """A filter value the run list reads as UTC and a ``datetime-local`` field can show."""
    return value.strftime("%Y-%m-%dT%H:%M:%S")


def nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 × 10ⁿ at least ``value`` (at least 1)."""
    scale = 1
    while True:
        for step in (1, 2, 5):
            if step * scale >= value:
                return step * scale
        scale *= 10


@dataclass(frozen=True)
class Segment:
    css: str
    count: int
    y: float
    height: float
    href: str
    label: str


@dataclass(frozen=True)
class Bar:
    minute: datetime
    x: float
    width: float
    total: int
    segments: list[Segment]


@dataclass(frozen=True)
class Series:
    """One legend entry: completed, cancelled, or one failure code (None: failed, no code)."""

    css: str
    label: str
    status: str
    code: str | None
    count: int
    href: str


@dataclass
class Chart:
    start: datetime
    end: datetime
    minutes: int
    bars: list[Bar]
    series: list[Series]
    y_max: int
    y_ticks: list[tuple[float, int]] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM

    @property
    def total(self) -> int:
        return sum(s.count for s in self.series)


def _series(window: store.FinishedWindow, runs_url: RunsUrl) -> list[Series]:
    since = _query_time(window.start)
    totals: Counter[tuple[str, str | None]] = Counter()
    for row in window.rows:
        totals[(row.status, row.failure_code if row.status == states.FAILED else None)] += row.count
    series = []
    for status, css, label in (
        (states.COMPLETED, "s-completed", "Completed"),
        (states.CANCELLED, "s-cancelled", "Cancelled"),
    ):
        series.append(
            Series(
                css,
                label,
                status,
                None,
                totals[(status, None)],
                runs_url(status=status, finished_from=since),
            )
        )
    failed = sorted(
        ((code, n) for (status, code), n in totals.items() if status == states.FAILED),
        key=lambda item: (-item[1], item[0] or ""),
    )
    for rank, (code, n) in enumerate(failed):
        css = f"s-fail-{rank}" if rank < CODE_COLOURS else "s-fail-other"
        query: dict[str, str] = {"status": states.FAILED, "finished_from": since}
        if code is not None:
            query["failure_code"] = code
        series.append(
            Series(css, f"Failed {code or '(no code)'}", states.FAILED, code, n, runs_url(**query))
        )
    return series


def chart(window: store.FinishedWindow, runs_url: RunsUrl) -> Chart:
    """Bars per minute, stacked: completed, cancelled, then failed by code."""
    series = _series(window, runs_url)
    per_minute: dict[datetime, Counter[tuple[str, str | None]]] = {}
    for row in window.rows:
        code = row.failure_code if row.status == states.FAILED else None
        per_minute.setdefault(row.minute, Counter())[(row.status, code)] += row.count
    busiest = max((sum(c.values()) for c in per_minute.values()), default=0)
    y_max = nice_ceiling(busiest)
    c = Chart(window.start, window.now, window.minutes, [], series, y_max)
    slot = (c.right - c.left) / window.minutes
    scale = (c.bottom - c.top) / y_max
    for i in range(window.minutes):
        minute = window.start + timedelta(minutes=i)
        counts = per_minute.get(minute)
        if not counts:
            continue
        y = float(c.bottom)
        segments = []
        for s in series:
            n = counts.get((s.status, s.code), 0)
            if not n:
                continue
            height = n * scale
            y -= height
            query: dict[str, str] = {
                "status": s.status,
                "finished_from": _query_time(minute),
                "finished_until": _query_time(minute + timedelta(minutes=1)),
            }
            if s.code is not None:
                query["failure_code"] = s.code
            segments.append(
                Segment(s.css, n, round(y, 2), round(height, 2), runs_url(**query), s.label)
            )
        total = sum(seg.count for seg in segments)
        bars_x = round(c.left + i * slot + 0.5, 2)
        c.bars.append(Bar(minute, bars_x, round(max(slot - 1, 1), 2), total, segments))
    ticks = (0, y_max // 2, y_max) if y_max % 2 == 0 else (0, y_max)
    c.y_ticks = [(round(c.bottom - v * scale, 2), v) for v in ticks]
    step = next((s for s in _STEPS if window.minutes / s <= 8), _STEPS[-1])
    for i in range(window.minutes + 1):
        minute = window.start + timedelta(minutes=i)
        if (minute.hour * 60 + minute.minute) % step == 0:
            c.x_ticks.append((round(c.left + i * slot, 2), f"{minute:%H:%M}"))
    return c


@dataclass(frozen=True)
class StatusCount:
    status: str
    count: int
    capped: bool
    href: str
    finished: bool  # counted over the window (a finished status), not now


def status_counts(
    active: dict[str, int], c: Chart, cap: int, runs_url: RunsUrl
) -> list[StatusCount]:
    """Unfinished statuses now (counted up to ``cap``), then the finished ones in the window."""
    shown = [
        StatusCount(s, active.get(s, 0), active.get(s, 0) >= cap, runs_url(status=s), False)
        for s in store.ACTIVE_STATUSES
    ]
    since = _query_time(c.start)
    for status in states.TERMINAL_STATUSES:
        n = sum(s.count for s in c.series if s.status == status)
        shown.append(
            StatusCount(status, n, False, runs_url(status=status, finished_from=since), True)
        )
    return shown


def page(
    active: dict[str, int],
    window: store.FinishedWindow,
    interventions: store.Interventions,
    backlog: dict[str, store.Backlog],
    cap: int,
    runs_url: RunsUrl,
) -> dict[str, Any]:
    """Everything the overview template shows."""
    c = chart(window, runs_url)
    return {
        "statuses": status_counts(active, c, cap, runs_url),
        "chart": c,
        "hours": window.minutes / 60,
        "interventions": interventions,
        "interventions_href": runs_url(saga_status="MANUAL_INTERVENTION"),
        "backlog": backlog,
        "backlog_hrefs": {status: runs_url(outbox=status) for status in backlog},
        "cap": cap,
    }
