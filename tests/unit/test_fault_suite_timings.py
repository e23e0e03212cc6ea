"""The fault suites' timings (``tests/support/timings.py``): production's defaults, every one
multiplied by the same factor, and accepted by the settings' checks at the scales the suites
use."""

from __future__ import annotations

import pytest

from awooop import secrets
from awooop.config import Settings
from awooop.domain import timing
from tests.chaos.stack import TIMINGS
from tests.support.timings import SCALED, production_defaults, production_ratios, seconds

BASE = {
    "AWOOOP_DATABASE_URL": "postgresql://x/y",
    "AWOOOP_BROKER_URL": "redis://x",
    "AWOOOP_SECRET_KEY": secrets.new_encryption_key(),
}


def test_production_ratios_at_one_are_the_production_defaults():
    env = production_ratios(1.0)
    assert seconds(env, "lease_ttl_seconds") == 300
    assert seconds(env, "heartbeat_interval_seconds") == 30
    assert seconds(env, "reaper_interval_seconds") == 60
    assert seconds(env, "worker_liveness_interval_seconds") == 5
    assert seconds(env, "worker_dead_after_seconds") == 20
    assert seconds(env, "worker_belief_margin_seconds") == 5
    assert seconds(env, "worker_watch_interval_seconds") == 10


@pytest.mark.parametrize("scale", [0.1, 0.05, 0.5])
def test_every_setting_is_scaled_by_the_same_factor(scale):
    env = production_ratios(scale)
    defaults = production_defaults()
    assert set(env) == {f"AWOOOP_{name.upper()}" for name in SCALED}
    for name in SCALED:
        assert seconds(env, name) == pytest.approx(defaults[name] * scale)


@pytest.mark.parametrize("scale", [1.0, 0.1, 0.05])
def test_the_scaled_settings_pass_the_settings_checks(scale):
    settings = Settings.from_env({**BASE, **production_ratios(scale)})  # checks the relations
    assert settings.worker_dead_after_seconds < settings.lease_ttl_seconds


def test_the_chaos_suite_takes_a_dead_worker_over_before_its_lease_would_expire():
    settings = Settings.from_env({**BASE, **TIMINGS})
    dead_worker_taken_by = timing.takeover_within(
        settings.worker_dead_after_seconds, settings.worker_watch_interval_seconds
    )
    assert dead_worker_taken_by < settings.lease_ttl_seconds - settings.heartbeat_interval_seconds


def test_a_scale_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="positive"):
        production_ratios(0)
