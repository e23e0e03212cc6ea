"""``make bench`` keeps its last full runs' target figures beside the page and shows them side
by side, so that "three consecutive runs" can be read off the page."""

from __future__ import annotations

import json

from bench import report, run


def a_run(date: str, admission: str, verdict: str = "met") -> dict:
    return {
        "date": date,
        "code": "abc1234",
        "targets": [
            ["AwoooP new events / baseline, req/s @16", admission, ">= 0.80", verdict],
            ["PostgreSQL commits per run (admission included)", "5.000", "<= 5", "met"],
        ],
    }


def test_the_history_keeps_the_last_three_runs_the_newest_last(tmp_path):
    path = tmp_path / "benchmarks.runs.json"
    for i in range(5):
        runs = report.recent_runs(path, a_run(f"day {i}", f"0.8{i}"))

    assert [r["date"] for r in runs] == ["day 2", "day 3", "day 4"]
    assert json.loads(path.read_text()) == runs


def test_the_table_has_a_column_per_run_and_marks_a_missed_target():
    runs = [a_run("day 1", "0.79", "MISSED"), a_run("day 2", "0.84")]

    table = report.recent_runs_table(runs)

    assert table.splitlines() == [
        "| measure | day 1, code abc1234 | day 2, code abc1234 | target |",
        "|---|---:|---:|---|",
        "| AwoooP new events / baseline, req/s @16 | 0.79 ✗ | 0.84 | ≥ 0.80 |",
        "| PostgreSQL commits per run (admission included) | 5.000 | 5.000 | ≤ 5 |",
    ]


def test_a_run_that_measured_other_targets_reads_n_a_where_they_differ():
    older = a_run("day 1", "0.81")
    older["targets"] = older["targets"][1:]

    table = report.recent_runs_table([older, a_run("day 2", "0.84")])

    assert "| AwoooP new events / baseline, req/s @16 | n/a | 0.84 | ≥ 0.80 |" in table


def test_a_run_keeps_only_the_measures_with_a_target():
    rows = [
        ("AwoooP duplicates / new events, req/s @16", 1.5, "(none)", "-"),
        ("PostgreSQL commits per run (admission included)", 5.0, "<= 5", "met"),
    ]

    kept = run.this_run({"date": "d", "code": "c"}, rows)["targets"]

    assert kept == [["PostgreSQL commits per run (admission included)", "5.000", "<= 5", "met"]]


def test_the_history_sits_beside_the_page(tmp_path):
    assert run.history_path(tmp_path / "benchmarks.md") == tmp_path / "benchmarks.runs.json"
