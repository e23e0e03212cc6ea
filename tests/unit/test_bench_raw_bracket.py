"""``make bench``'s end-to-end ratio divides by raw Celery measured before and after AwoooP's
batch (bench.run): the arithmetic and the summary's words; the rates come from the bench."""

from __future__ import annotations

import math

from bench import run


def ratio_row(raw: dict, awooop_per_s: float) -> tuple[str, float, str, str]:
    rows = run.ratios([], raw, {"per_s": awooop_per_s}, (16,))
    return next(row for row in rows if row[0].startswith("AwoooP noop-3"))


def test_the_ratio_divides_by_the_mean_of_the_raw_rates_before_and_after():
    raw = run.bracket_raw({"per_s": 800.0, "tasks": 3000}, {"per_s": 1200.0, "tasks": 3000})

    assert raw["bracket_per_s"] == 1000.0
    assert raw["drift_pct"] == 40.0
    _, value, _, verdict = ratio_row(raw, 400.0)
    # Against the first measurement alone it would read 0.50, against the second 0.33.
    assert value == 0.40
    assert verdict == "met"


def test_without_a_second_measurement_the_ratio_divides_by_the_first():
    raw = run.bracket_raw({"per_s": 1000.0}, None)

    assert "bracket_per_s" not in raw
    _, value, _, verdict = ratio_row(raw, 390.0)
    assert math.isclose(value, 0.39)
    assert verdict == "MISSED"


def test_rates_far_apart_make_the_summary_say_the_ratio_is_uncertain():
    far = run.bracket_raw({"per_s": 500.0}, {"per_s": 700.0})
    near = run.bracket_raw({"per_s": 1000.0}, {"per_s": 1100.0})

    note = run.drift_note(far)
    assert note is not None
    assert "500 tasks/s before" in note and "700 after" in note and "33 % apart" in note
    assert "uncertain" in note
    assert run.drift_note(near) is None
    assert run.drift_note(run.bracket_raw({"per_s": 1000.0}, None)) is None


def test_the_console_table_shows_both_raw_rates_and_the_divisor():
    raw = run.bracket_raw(
        {"per_s": 500.0, "tasks": 3000, "worker_cpu_ms": 1.0},
        {"per_s": 700.0, "tasks": 3000, "worker_cpu_ms": 1.1},
    )
    table = run.render_table([], raw, {"per_s": 240.0, "runs": 2000}, [], [])

    assert "raw Celery, after" in table and "700 tasks/s" in table
    assert "raw Celery, mean" in table and "600 tasks/s" in table
    assert "uncertain" in table
