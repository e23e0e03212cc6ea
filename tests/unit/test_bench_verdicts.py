"""``make bench`` takes each ratio as the median of three interleaved pairs and measures a noisy
pair again (bench.verdicts); the arithmetic and the report's words, no services."""

from __future__ import annotations

import math

from bench import procs, run, verdicts


def pair(value: float, *reasons: str) -> verdicts.Pair:
    return verdicts.Pair({"e2e": value}, list(reasons))


def noise(other: float, steal: float = 0.0) -> dict[str, float]:
    return {"other_cpu_pct": other, "steal_cpu_pct": steal, "io_cpu_pct": 0.0}


def test_a_pair_is_noisy_when_other_cpu_exceeds_five_percent_in_one_of_its_phases():
    assert verdicts.noise_reasons({"raw": noise(4.6), "AwoooP": noise(5.0)}) == []

    [reason] = verdicts.noise_reasons({"raw": noise(1.0), "AwoooP": noise(7.2)})

    assert reason == "other CPU 7 % during AwoooP"


def test_a_pair_is_noisy_when_the_hypervisor_stole_more_than_five_percent_in_one_phase():
    assert verdicts.noise_reasons({"raw": noise(0.0, 5.4), "AwoooP": noise(2.0, 3.0)}) == []

    [reason] = verdicts.noise_reasons({"raw": noise(0.0, 12.0), "AwoooP": noise(0.0, 1.0)})

    assert reason == "steal 12 % during raw"


def test_results_measured_before_steal_was_read_are_judged_on_other_cpu_alone():
    old = {"other_cpu_pct": 1.0, "io_cpu_pct": 9.0}

    assert verdicts.noise_reasons({"AwoooP": old}) == []


def test_a_pair_is_noisy_when_its_raw_rates_are_more_than_twenty_percent_apart():
    assert verdicts.noise_reasons({}, (1000.0, 1200.0)) == []  # 18 % of the mean

    [reason] = verdicts.noise_reasons({}, (500.0, 700.0))

    assert "500 then 700 tasks/s" in reason and "33 % apart" in reason


def test_three_clean_pairs_need_no_more_and_their_median_is_the_ratio():
    pairs = [pair(0.30), pair(0.41), pair(0.35)]

    assert not verdicts.need_more(pairs)
    verdicts.choose(pairs)

    assert math.isclose(verdicts.median(pairs, "e2e"), 0.35)


def test_a_noisy_pair_is_measured_again_rather_than_counted():
    pairs = [pair(0.30), pair(0.90, "other CPU 12 % during AwoooP"), pair(0.35)]

    assert verdicts.need_more(pairs)
    pairs.append(pair(0.33))
    assert not verdicts.need_more(pairs)
    verdicts.choose(pairs)

    assert [p.counted for p in pairs] == [True, False, True, True]
    assert math.isclose(verdicts.median(pairs, "e2e"), 0.33)
    [line] = verdicts.describe(pairs, "end to end -c 1")
    assert line == "end to end -c 1, pair 2: other CPU 12 % during AwoooP: measured again"


def test_re_measurement_is_bounded_and_noisy_pairs_then_count_marked():
    pairs = [pair(0.30), pair(0.50, "a"), pair(0.40, "b"), pair(0.31)]

    assert not verdicts.need_more(pairs)  # four pairs in all, whatever their noise
    verdicts.choose(pairs)

    assert [p.counted for p in pairs] == [True, True, False, True]
    assert sum(1 for p in pairs if p.counted and p.noisy) == 1
    assert math.isclose(verdicts.median(pairs, "e2e"), 0.31)
    lines = verdicts.describe(pairs, "admission @64")
    assert lines[0] == (
        "admission @64, pair 2: a: counted anyway, marked (fewer than 3 clean in 4)"
    )
    assert lines[1].endswith("pair 3: b: measured again")


def test_the_targets_rows_read_the_medians_and_the_report_names_the_noisy_pairs():
    admission = {
        16: [
            verdicts.Pair({"new": 0.9, "duplicate": 1.2, "duplicate_own": 1.3, "p99": 1.0}),
            verdicts.Pair({"new": 0.7, "duplicate": 1.1, "duplicate_own": 1.5, "p99": 1.4}),
            verdicts.Pair({"new": 0.85, "duplicate": 1.0, "duplicate_own": 1.2, "p99": 1.1}),
        ]
    }
    e2e_pairs = [
        pair(0.40),
        pair(0.9, "other CPU 9 % during AwoooP's batch"),
        pair(0.44),
        pair(0.42),
    ]
    for series in (admission[16], e2e_pairs):
        verdicts.choose(series)
    e2e = {"series": {1: {"pairs": e2e_pairs, "ratio": verdicts.median(e2e_pairs, "e2e")}}}

    rows = {
        what: (value, verdict) for what, value, _, verdict in run.ratios([], admission, e2e, (16,))
    }

    assert rows["AwoooP new events / baseline, req/s @16"] == (0.85, "met")
    assert rows["p99 AwoooP new events / baseline @16"] == (1.1, "met")
    assert rows["AwoooP noop-3 runs/s / raw Celery tasks/s, -c 1"] == (0.42, "met")
    assert rows["AwoooP noop-3 runs/s / raw Celery tasks/s, -c 1 (stretch)"] == (0.42, "met")
    [line] = run.noise_lines(admission, e2e)
    assert line.startswith("end to end -c 1, pair 2: other CPU 9 %")


def test_at_minus_c_1_the_target_is_a_third_and_0_40_a_stretch_line():
    series = [pair(0.35), pair(0.36), pair(0.34)]
    verdicts.choose(series)
    e2e = {"series": {1: {"pairs": series, "ratio": verdicts.median(series, "e2e")}}}

    rows = {what: (target, verdict) for what, _, target, verdict in run.ratios([], {}, e2e, ())}

    assert rows["AwoooP noop-3 runs/s / raw Celery tasks/s, -c 1"] == (">= 0.33", "met")
    assert rows["AwoooP noop-3 runs/s / raw Celery tasks/s, -c 1 (stretch)"] == (
        ">= 0.40",
        "MISSED",
    )


def test_cpu_per_run_and_wal_flushes_per_run_are_judged_against_four_and_three():
    e2e = {"cpu_ratio": 4.4, "commits_per_run": 5.0, "wal_flushes_per_run": 2.9}

    rows = {what: (target, verdict) for what, _, target, verdict in run.ratios([], {}, e2e, ())}

    cpu = "CPU per run (web + worker + PostgreSQL + Redis) / raw Celery's per task"
    assert rows[cpu] == ("<= 4.0", "MISSED")
    assert rows["PostgreSQL commits per run (admission included)"] == ("<= 5", "met")
    assert rows["of which waited for a WAL flush (WAL flushes per run)"] == ("<= 3", "met")


def test_the_soaks_cpu_is_set_against_the_raw_batches_either_side_of_it():
    raws = [{"cpu_ms": 1.0}, {"cpu_ms": 1.2}, {"cpu_ms": 1.6}]
    e2e = {"cpu_ms_per_run": {"web": 3.0, "worker": 3.6}, "raw_after_soak": {"cpu_ms": 2.0}}

    run.cpu_per_run(e2e, raws)

    assert e2e["raw_cpu_ms"] == 1.8  # the last series' last batch and the one after the soak
    assert e2e["cpu_ratio"] == 6.6 / 1.8


def test_without_a_soak_raw_celerys_cpu_is_the_median_of_the_last_series():
    e2e: dict = {}

    run.cpu_per_run(e2e, [{"cpu_ms": 1.0}, {"cpu_ms": 1.2}, {"cpu_ms": 1.6}])

    assert e2e == {"raw_cpu_ms": 1.2}


def test_cpu_of_processes_is_counted_from_the_first_sample_or_whole_when_they_started_since():
    before = {10: 1.0, 11: 2.0, 12: 5.0}
    after = {10: 1.5, 11: 2.0, 13: 0.25}  # 12 exited, 13 started in between

    assert procs.cpu_delta(before, after) == 0.75


def test_pairs_are_measured_until_three_are_clean_or_four_measured_and_the_counted_marked():
    measured = iter([pair(0.30), pair(0.90, "noisy"), pair(0.35), pair(0.33), pair(0.5)])
    asked: list[int] = []

    def measure(k: int) -> verdicts.Pair:
        asked.append(k)
        return next(measured)

    pairs = verdicts.measure_pairs("end to end -c 1", measure)

    assert asked == [1, 2, 3, 4]
    assert [p.counted for p in pairs] == [True, False, True, True]
