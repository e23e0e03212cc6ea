"""Cluster scenario 1 — work spreads over the worker hosts.

2,000 runs of ``chaos-saga`` (four steps, three side effects at the recorder) are delivered
over the bridge to gunicorn on ``web`` by a provider-like client (retries, 10 % exact
redeliveries). Workers ``w1`` and ``w2`` (two prefork processes each) take them from Redis on
``db``; the maintenance worker and beat run on ``ops``.

From PostgreSQL and the recorder: every event has one run and every run COMPLETED; both
worker hosts completed a fair share (each at least :data:`FAIR_SHARE` of the runs); no step
completed twice; one effect per effect id, each recorded by the recorder.
"""

from __future__ import annotations

import time

import pytest

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.cluster import checks as cluster_checks
from tests.cluster.suite import SUITE

RUNS = SUITE.scaled(2000, least=100)
FAIR_SHARE = 0.35


def run_spread(stack, figures, runs: int = RUNS) -> None:
    """Deliver ``runs`` events, wait for them, and assert and report the spread (also
    scenario 7 on RabbitMQ)."""
    provider = stack.provider(threads=8, redelivery_share=0.1)
    deliveries = [api_event(stack.project, stack.new_key("spread"), {}) for _ in range(runs)]

    started = time.monotonic()
    provider.deliver_all(deliveries)
    admitted_s = time.monotonic() - started
    run_ids = [d.run_id for d in deliveries]
    assert all(run_ids), "an event got no run"
    checks.wait_terminal(stack.engine, run_ids, timeout=max(300, runs * 0.5))
    done_s = time.monotonic() - started

    by_host = cluster_checks.runs_by_host(stack.engine)
    counts = checks.status_counts(stack.engine)
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    figures.update(
        {
            "runs": runs,
            "admission_s": round(admitted_s, 1),
            "admitted_per_s": round(runs / admitted_s, 1),
            "all_completed_after_s": round(done_s, 1),
            "runs_completed_per_s": round(runs / done_s, 1),
            "runs_by_worker_host": by_host,
            "steps_by_worker_host": cluster_checks.steps_by_host(stack.engine),
            "claims_by_worker_host": cluster_checks.claims_by_host(stack.engine),
            "least_host_share": round(min(by_host.values(), default=0) / runs, 3),
            "runs_by_status": counts,
            "attempts_histogram": checks.attempts_histogram(stack.engine),
            "steps_completed_twice": len(doubles),
            **provider.figures(),
            **effects.figures,
        }
    )

    assert counts == {"COMPLETED/COMPLETED": runs}
    assert len(set(run_ids)) == runs
    assert provider.redelivery_mismatches == [] and provider.gave_up == []
    assert set(by_host) == {"w1", "w2"}, by_host
    assert min(by_host.values()) >= FAIR_SHARE * runs, by_host
    assert doubles == []
    assert effects.missing == [] and effects.unknown == []
    assert effects.repeated == {}, "an effect was made twice with no fault at all"
    assert effects.journal_effects == 3 * runs


@pytest.mark.timeout(1800)
def test_runs_spread_over_both_worker_hosts_and_all_complete(cluster, figures):
    figures.scenario("1", "Work spreads over two worker hosts")
    run_spread(cluster.start(), figures)
