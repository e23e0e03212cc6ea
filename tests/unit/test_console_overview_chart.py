"""The overview's chart geometry, from rows as the store returns them (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from awooop.store.overview import Finished, FinishedWindow
from awooop.web import overview

START = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)


def url(**query: str) -> str:
    return "/console/runs?" + "&".join(f"{k}={v}" for k, v in sorted(query.items()))


def window(*rows: Finished) -> FinishedWindow:
    return FinishedWindow(START, START + timedelta(minutes=179, seconds=30), 180, list(rows))


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 1), (1, 1), (2, 2), (3, 5), (5, 5), (6, 10), (15, 20), (51, 100)]
)
def test_the_scale_rounds_up_to_one_two_or_five(value, ceiling):
    assert overview.nice_ceiling(value) == ceiling


def test_an_empty_window_has_no_bars_but_an_axis():
    c = overview.chart(window(), url)

    assert c.bars == [] and c.total == 0 and c.y_max == 1
    assert [label for _, label in c.x_ticks] == [
        "07:00",
        "07:30",
        "08:00",
        "08:30",
        "09:00",
        "09:30",
        "10:00",
    ]
    assert [s.label for s in c.series] == ["Completed", "Cancelled"]


def test_failure_codes_get_colours_by_frequency_and_the_rest_share_one():
    minute = START + timedelta(minutes=10)
    codes = {"E-A": 6, "E-B": 5, "E-C": 4, "E-D": 3, "E-E": 2, "E-F": 1}
    c = overview.chart(
        window(*(Finished(minute, "FAILED", code, n) for code, n in codes.items())), url
    )

    failed = {s.code: s.css for s in c.series if s.status == "FAILED"}
    assert failed == {
        "E-A": "s-fail-0",
        "E-B": "s-fail-1",
        "E-C": "s-fail-2",
        "E-D": "s-fail-3",
        "E-E": "s-fail-other",
        "E-F": "s-fail-other",
    }
    (bar,) = c.bars
    assert bar.total == 21 and c.y_max == 50
    assert bar.segments[0].href == url(
        status="FAILED",
        failure_code="E-A",
        finished_from="2026-11-29T07:10:00",
        finished_until="2026-11-29T07:11:00",
    )


def test_a_failed_run_without_a_code_links_to_failed_runs_of_the_minute():
    minute = START + timedelta(minutes=1)
    c = overview.chart(window(Finished(minute, "FAILED", None, 1)), url)

    (bar,) = c.bars
    assert bar.segments[0].href == url(
        status="FAILED", finished_from="2026-11-29T07:01:00", finished_until="2026-11-29T07:02:00"
    )
    assert c.series[-1].label == "Failed (no code)"
