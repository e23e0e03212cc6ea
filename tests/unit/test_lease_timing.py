"""The lease protocol's timing rule: a lease is renewed at least three times per TTL, and a
worker stops believing it holds its runs before the reaper may judge it dead. Settings and
workflows that break it are refused at start with a message naming what to change; the
holder's belief lapses exactly when the rule says."""

from __future__ import annotations

import random
import types
from datetime import UTC, datetime

import pytest

from awooop import secrets
from awooop.config import ConfigError, Settings
from awooop.domain import timing, workflow
from awooop.domain.workflow import Step, Workflow
from awooop.engine import lease, watch

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


def test_a_worker_whose_belief_would_not_survive_a_failed_beat_is_refused_naming_the_variables():
    with pytest.raises(
        ConfigError,
        match="AWOOOP_WORKER_DEAD_AFTER_SECONDS=10 minus AWOOOP_WORKER_BELIEF_MARGIN_SECONDS=5 "
        ".*AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS=5",
    ):
        Settings.from_env({**BASE, "AWOOOP_WORKER_DEAD_AFTER_SECONDS": "10"})


def test_a_belief_margin_within_the_clock_drift_bound_is_refused():
    # 2 % of 20 s is 0.4 s: a margin below it could let the reaper act while the worker
    # still believes, with clocks 1 % apart.
    with pytest.raises(ConfigError, match="AWOOOP_WORKER_BELIEF_MARGIN_SECONDS=0.3 must be more"):
        Settings.from_env({**BASE, "AWOOOP_WORKER_BELIEF_MARGIN_SECONDS": "0.3"})
    Settings.from_env({**BASE, "AWOOOP_WORKER_BELIEF_MARGIN_SECONDS": "0.5"})


def test_the_default_rule_holds_for_clocks_one_percent_apart():
    s = Settings.from_env(BASE)
    rho = timing.CLOCK_RATE_BOUND
    believes_at_most = (s.worker_dead_after_seconds - s.worker_belief_margin_seconds) / (1 - rho)
    reaper_acts_at_least = s.worker_dead_after_seconds / (1 + rho)
    assert believes_at_most < reaper_acts_at_least
    # A dead worker's runs move within dead_after + two watch intervals of its last beat.
    assert (
        timing.takeover_within(s.worker_dead_after_seconds, s.worker_watch_interval_seconds) == 40
    )


@pytest.mark.parametrize("seed", range(20))
def test_a_dead_workers_runs_are_judged_dead_within_takeover_within_of_its_last_beat(seed):
    # Given the reaper's watch passes, each at most a watch interval after the one before (a
    # pass may come early or late), and a worker whose last beat committed at time 0
    dead_after, interval = 20.0, 10.0
    before, last = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    rng = random.Random(seed)
    clock = Clock()
    clock.now = -rng.uniform(0, 2 * interval)
    reaper = watch.WorkerWatch(dead_after, clock)

    # When the passes go on (a pass before time 0 reads the beat before the last)
    judged_at = None
    while judged_at is None:
        reaper.observe("db", {"w1": before if clock.now < 0 else last})
        if reaper.dead() == {"w1": last}:
            judged_at = clock.now
        clock.now += rng.uniform(0.01, interval)

    # Then the pass that judges it comes at most dead_after + two intervals after the beat
    assert dead_after <= judged_at <= timing.takeover_within(dead_after, interval)


def test_the_takeover_bound_is_reached_when_the_passes_fall_just_short_of_their_interval():
    # The first pass after the beat comes a whole interval later; each one after it a little
    # less than an interval after the one before, so the second after the first sight is
    # still short of dead_after and the third judges.
    dead_after, interval = 20.0, 10.0
    clock = Clock()
    clock.now = 0.0
    reaper = watch.WorkerWatch(dead_after, clock)
    reaper.observe("db", {"w1": datetime(2026, 1, 1, tzinfo=UTC)})  # just before the beat
    token = {"w1": datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)}
    passes = [interval, interval - 0.01, interval - 0.01, interval - 0.01]
    judged_at = None
    for gap in passes:
        clock.now += gap
        reaper.observe("db", token)
        if reaper.dead():
            judged_at = clock.now
            break

    assert judged_at == pytest.approx(timing.takeover_within(dead_after, interval) - 0.03)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_belief_lasts_dead_after_minus_margin_from_the_start_of_the_last_committed_beat():
    clock = Clock()
    liveness = lease.Liveness(dead_after=20, margin=5, clock=clock)
    assert liveness.believed()  # no beat attempted: no row to be judged by

    started = liveness.attempting()  # a first beat, whose reply is lost
    clock.now += 14.9
    assert liveness.believed()
    clock.now += 0.1
    assert not liveness.believed()  # from the first attempt: it may have committed

    started = liveness.attempting()
    clock.now += 3  # the beat took 3 s to commit: the belief counts from its start
    liveness.committed(started)
    clock.now += 11.9
    assert liveness.believed()
    clock.now += 0.1
    assert not liveness.believed()


def test_a_lease_is_not_believed_once_its_process_beliefs_lapse():
    clock = Clock()
    claim = types.SimpleNamespace(run_id="r", project_id="p", worker_id="w", lease_epoch=1)
    held = lease.Lease(None, claim, ttl=300, interval=30, clock=clock)  # type: ignore[arg-type]
    held.liveness = lease.Liveness(dead_after=20, margin=5, clock=clock)
    held.liveness.committed(held.liveness.attempting())
    assert held.believed()
    clock.now += 15
    assert not held.believed()  # exact when read
    assert held.lost.is_set()  # and latched:
    held.liveness.committed(held.liveness.attempting())  # a beat that lands afterwards
    assert not held.believed()
