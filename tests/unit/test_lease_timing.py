"""A lease is renewed at least three times per TTL (DESIGN §9.5): settings and workflows that
break this are refused at start with a message naming what to change."""

from __future__ import annotations

import pytest

from awooop import secrets
from awooop.config import ConfigError, Settings
from awooop.domain import workflow
from awooop.domain.workflow import Step, Workflow

BASE = {
    "AWOOOP_DATABASE_URL": "postgresql://x/y",
    "AWOOOP_BROKER_URL": "redis://x",
    "AWOOOP_SECRET_KEY": secrets.new_encryption_key(),
}


def _noop(ctx):
    return None


def test_settings_renewing_less_than_three_times_per_ttl_are_refused_naming_both_variables():
    with pytest.raises(
        ConfigError, match="AWOOOP_HEARTBEAT_INTERVAL_SECONDS=40 .*AWOOOP_LEASE_TTL_SECONDS=100"
    ):
        Settings.from_env(
            {**BASE, "AWOOOP_LEASE_TTL_SECONDS": "100", "AWOOOP_HEARTBEAT_INTERVAL_SECONDS": "40"}
        )


def test_settings_renewing_exactly_three_times_per_ttl_are_accepted():
    s = Settings.from_env(
        {
            **BASE,
            "AWOOOP_LEASE_TTL_SECONDS": "3",
            "AWOOOP_HEARTBEAT_INTERVAL_SECONDS": "1",
            "AWOOOP_REAPER_INTERVAL_SECONDS": "2",
        }
    )
    assert (s.lease_ttl_seconds, s.heartbeat_interval_seconds) == (3, 1)


def test_a_workflow_lease_shorter_than_three_renewal_intervals_is_refused_at_worker_start():
    short = Workflow("short-lease", 1, [Step("one", _noop)], lease_ttl_seconds=60)
    fine = Workflow("long-lease", 1, [Step("one", _noop)], lease_ttl_seconds=90)

    workflow.check_leases([fine], renewal_interval=30)
    with pytest.raises(
        workflow.LeaseTooShort,
        match="short-lease v1: lease_ttl_seconds=60 .*AWOOOP_HEARTBEAT_INTERVAL_SECONDS=30",
    ):
        workflow.check_leases([fine, short], renewal_interval=30)


def test_a_workflow_lease_ttl_must_be_positive():
    with pytest.raises(ValueError, match="lease_ttl_seconds must be positive"):
        Workflow("zero-lease", 1, [Step("one", _noop)], lease_ttl_seconds=0)


def test_worker_judged_dead_before_three_liveness_intervals_is_refused_naming_both_variables():
    with pytest.raises(
        ConfigError,
        match="AWOOOP_WORKER_DEAD_AFTER_SECONDS=10 .*AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS=5",
    ):
        Settings.from_env({**BASE, "AWOOOP_WORKER_DEAD_AFTER_SECONDS": "10"})


def test_default_liveness_timing_moves_a_dead_workers_runs_within_ninety_seconds():
    s = Settings.from_env(BASE)
    assert s.worker_dead_after_seconds >= 3 * s.worker_liveness_interval_seconds
    # Stale after dead_after, found by the next reaper pass, claimed at once.
    assert s.worker_dead_after_seconds + s.reaper_interval_seconds < 90
