"""Cron schedules: the expression a workflow may declare, and the missed-tick policy."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from awooop.domain import schedule
from awooop.domain.workflow import Step, Workflow

STEPS = [Step("a", lambda ctx: None)]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_workflow_accepts_a_five_field_cron_expression():
    assert Workflow("w", 1, STEPS, schedule="*/5 * * * *").schedule == "*/5 * * * *"


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("*/5 * * *", "five fields"),
        ("* * * * * *", "five fields"),  # cronsim reads seconds; a sweep cannot honour them
        ("", "five fields"),
        ("61 * * * *", "not valid cron: Bad minute"),
        ("* 24 * * *", "not valid cron: Bad hour"),
        ("every day", "five fields"),
    ],
)
def test_a_workflow_refuses_an_invalid_schedule_when_it_is_defined(expression, says):
    with pytest.raises(ValueError, match=says) as refused:
        Workflow("nightly", 1, STEPS, schedule=expression)

    assert "workflow 'nightly'" in str(refused.value)


def test_a_schedule_is_not_part_of_the_digest():
    assert Workflow("w", 1, STEPS).digest == Workflow("w", 1, STEPS, schedule="0 * * * *").digest


def test_the_latest_tick_is_at_or_before_now():
    assert schedule.latest_tick("*/5 * * * *", at("2026-12-02T09:07:59")) == at("2026-12-02T09:05")
    assert schedule.latest_tick("*/5 * * * *", at("2026-12-02T09:10:00")) == at("2026-12-02T09:10")


def test_tick_keys_are_fixed_width_utc_and_read_back():
    key = schedule.event_id("nightly", at("2026-12-02T00:00"))

    assert key == "nightly@2026-12-02T00:00:00Z"
    assert schedule.tick_of("nightly", key) == at("2026-12-02T00:00")
    assert schedule.tick_of("night", key) is None


def test_a_due_tick_within_the_bound_is_admitted():
    decision = schedule.decide("*/5 * * * *", at("2026-12-02T09:06:00"), 300, None)

    assert (decision.action, decision.tick, decision.missed) == (
        schedule.ADMIT,
        at("2026-12-02T09:05"),
        None,
    )


def test_a_tick_already_started_is_not_started_again():
    decision = schedule.decide("*/5 * * * *", at("2026-12-02T09:06"), 300, at("2026-12-02T09:05"))

    assert decision.action == schedule.STARTED


def test_a_new_deployment_does_not_run_a_daily_job_hours_late():
    decision = schedule.decide("0 0 * * *", at("2026-12-02T09:00:30"), 300, None)

    assert (decision.action, decision.tick) == (schedule.LATE, at("2026-12-02T00:00"))


def test_after_an_outage_only_the_latest_tick_runs_and_the_older_ones_are_reported():
    decision = schedule.decide("*/5 * * * *", at("2026-12-02T09:01"), 300, at("2026-12-02T08:00"))

    assert decision.action == schedule.ADMIT
    assert decision.tick == at("2026-12-02T09:00")
    assert decision.missed == (at("2026-12-02T08:05"), at("2026-12-02T08:55"), 11)


def test_counting_missed_ticks_stops_at_its_limit():
    decision = schedule.decide("* * * * *", at("2026-12-02T09:00"), 300, at("2026-11-01T00:00"))

    assert decision.missed is not None
    assert decision.missed[1:] == (at("2026-12-02T08:59"), schedule.MISSED_COUNT_LIMIT)
