"""``make bench-peers``'s verdicts (bench.peers): latency at half capacity, the percentiles
from each workflow's admitted / first-step-started / completed times and the target's
verdict; the ratios, from AwoooP's drains either side of the peers'."""

from __future__ import annotations

import math

from bench import peers


def test_percentiles_are_nearest_rank_and_empty_gives_no_figure():
    values = [float(v) for v in range(1, 101)]

    assert peers.percentile(values, 0.50) == 50.0
    assert peers.percentile(values, 0.99) == 99.0
    assert peers.percentile([7.0], 0.99) == 7.0
    assert math.isnan(peers.percentile([], 0.5))


def test_latencies_run_from_admission_to_the_first_step_and_to_completion_in_ms():
    rows = [(100.0, 100.004, 100.010), (200.0, 200.006, 200.020), (300.0, 300.005, 300.015)]

    lat = peers.latencies(rows)

    assert math.isclose(lat["first_p50"], 5.0, abs_tol=1e-6)
    assert math.isclose(lat["first_p99"], 6.0, abs_tol=1e-6)
    assert math.isclose(lat["done_p50"], 15.0, abs_tol=1e-6)
    assert math.isclose(lat["done_p99"], 20.0, abs_tol=1e-6)


def first_step_row(p50: dict[str, float]) -> tuple[float, str]:
    results = {k: {"per_s": 1.0, "latency": {"first_p50": v}} for k, v in p50.items()}
    [(_, value, _, verdict)] = [r for r in peers.targets(results) if "first step" in r[0]]
    return value, verdict


def test_the_first_step_target_needs_ten_ms_or_less_and_the_lowest_of_the_three():
    assert first_step_row({"awooop": 4.0, "procrastinate": 9.0, "dbos": 500.0}) == (4.0, "met")
    assert first_step_row({"awooop": 4.0, "procrastinate": 3.0, "dbos": 500.0})[1] == "MISSED"
    assert first_step_row({"awooop": 12.0, "procrastinate": 30.0, "dbos": 500.0})[1] == "MISSED"


def test_the_ratios_take_the_mean_of_awooops_drains_either_side_of_the_peers():
    results = {
        "awooop": {"per_s": 380.0},  # a slow spell of the machine
        "procrastinate": {"per_s": 250.0},
        "dbos": {"per_s": 100.0},
        "awooop_again": {"per_s": 520.0},
    }
    rows = {what: (value, verdict) for what, value, _, verdict in peers.targets(results)}
    dbos = rows["AwoooP runs/s / DBOS Transact workflows/s"]
    procrastinate = rows["AwoooP steps/s (runs/s × 3) / Procrastinate jobs/s"]
    assert math.isclose(dbos[0], 4.5) and dbos[1] == "met"
    assert math.isclose(procrastinate[0], 1.8) and procrastinate[1] == "MISSED"


def test_without_a_second_drain_the_ratios_take_awooops_only_one():
    results = {"awooop": {"per_s": 400.0}, "dbos": {"per_s": 100.0}}
    [(_, value, _, _)] = [r for r in peers.targets(results) if "DBOS" in r[0]]
    assert math.isclose(value, 4.0)
