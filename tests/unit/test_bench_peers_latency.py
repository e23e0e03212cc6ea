"""``make bench-peers`` reports latency at half capacity (bench.peers): the percentiles from
each workflow's admitted / first-step-started / completed times, and the target's verdict."""

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
