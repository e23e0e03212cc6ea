"""A run whose workflow definition no worker has: handed back every minute, and failed with
E-RUN-003 once it has been handed back for AWOOOP_WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS.
Time passes by moving the run's recorded hand-backs into the past (the database clock is
what measures it), never by sleeping."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from awooop.engine import runner, sweeps
from awooop.store import leases, segments
from tests.support import db, metrics
from tests.support import runs as test_runs

LIMIT = 900.0


@pytest.fixture
def settings(settings):
    return dataclasses.replace(settings, workflow_unavailable_fail_after_seconds=LIMIT)


def strand(engine, run_id, version: int = 99) -> None:
    """Give the run a workflow version no process has registered."""
    db.execute(
        engine,
        "UPDATE awooop_run_state SET workflow_version = :v WHERE run_id = :r",
        v=version,
        r=run_id,
    )


def age_hand_backs(engine, run_id, seconds: float) -> None:
    """Move the run's recorded hand-backs ``seconds`` into the past, and make it claimable."""
    db.execute(
        engine,
        "UPDATE awooop_run_event SET at = at - make_interval(secs => :s)"
        " WHERE run_id = :r AND kind = 'lease'",
        s=seconds,
        r=run_id,
    )
    db.execute(
        engine, "UPDATE awooop_run_state SET available_at = now() WHERE run_id = :r", r=run_id
    )


def hand_back_delay(engine, run_id) -> float:
    """Seconds from the run's last move to when it may be claimed again."""
    (row,) = db.rows(
        engine,
        "SELECT extract(epoch FROM available_at - updated_at) AS delay"
        " FROM awooop_run_state WHERE run_id = :r",
        r=run_id,
    )
    return float(row["delay"])


def hand_backs(engine, run_id) -> list[dict]:
    return [
        e for e in db.events(engine, run_id) if e["detail"].get("reason") == "workflow_unavailable"
    ]


def unavailable_count(outcome: str, version: str = "99") -> float:
    return metrics.local(
        "awooop_workflow_unavailable_total", workflow="noop-3", version=version, outcome=outcome
    )


def test_a_run_first_found_unavailable_is_handed_back_for_a_minute(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    strand(engine, run_id)
    released_before = unavailable_count("released")

    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED

    row = db.run(engine, run_id)
    assert (row["status"], row["attempt_count"], hand_back_delay(engine, run_id)) == (
        "PENDING",
        0,
        60.0,
    )
    assert len(hand_backs(engine, run_id)) == 1
    assert unavailable_count("released") == released_before + 1


def test_a_run_unavailable_for_longer_than_the_limit_fails_with_its_own_code(
    engine, project, settings, caplog
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    strand(engine, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED
    age_hand_backs(engine, run_id, LIMIT + 1)
    failed_before = unavailable_count("failed")

    logger = logging.getLogger("awooop.engine.unavailable")
    logger.addHandler(caplog.handler)  # in case the awooop loggers do not propagate
    try:
        outcome = runner.execute(engine, settings, run_id)
    finally:
        logger.removeHandler(caplog.handler)

    assert outcome == runner.Outcome.FAILED
    row = db.run(engine, run_id)
    assert (row["status"], row["failure_code"], row["lease_until"]) == ("FAILED", "E-RUN-003", None)
    assert "no worker had workflow noop-3:v99" in row["failure_reason"]
    assert row["finished_at"] is not None
    (failure,) = [e for e in db.events(engine, run_id) if e["to_status"] == "FAILED"]
    assert failure["trigger_id"] == f"workflow_unavailable:{row['lease_epoch']}"
    assert failure["detail"]["failure_code"] == "E-RUN-003"
    assert unavailable_count("failed") == failed_before + 1
    # (a set: the record reaches caplog once or twice, as the loggers propagate or not)
    assert {
        getattr(r, "failure_code", None)
        for r in caplog.records
        if getattr(r, "action", "") == "workflow_unavailable_failed"
    } == {"E-RUN-003"}
    assert sweeps.reap_once(engine) == []  # nothing left for the reaper


def test_a_run_near_the_limit_is_handed_back_only_until_the_limit(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    strand(engine, run_id)
    runner.execute(engine, settings, run_id)
    age_hand_backs(engine, run_id, LIMIT - 10)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED

    assert 9.0 <= hand_back_delay(engine, run_id) <= 10.0
    assert len(hand_backs(engine, run_id)) == 2


def test_a_run_that_went_on_in_between_counts_its_unavailability_afresh(engine, project, settings):
    # Given a run handed back long ago, which then ran a step (a retry scheduled) on a
    # worker that had its definition
    run_id = test_runs.admit(engine, project["project_id"], "test-flaky", {"fail_times": 1})
    strand(engine, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED
    age_hand_backs(engine, run_id, LIMIT * 2)
    strand(engine, run_id, version=1)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED

    # When it is stranded again
    strand(engine, run_id)
    age_hand_backs(engine, run_id, 0)

    # Then its first new hand-back starts a new count: it is handed back, not failed
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED
    assert db.run(engine, run_id)["status"] == "PENDING"
    assert len(hand_backs(engine, run_id)) == 2


def test_a_step_recorded_in_between_starts_the_count_afresh(engine, project, settings):
    """A step record writes no history row; the count must see it all the same."""
    # Given a run handed back long ago, which then recorded a step on a worker that had its
    # definition, and was handed on by the reaper when that worker's lease ran out
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    strand(engine, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED
    age_hand_backs(engine, run_id, LIMIT * 2)
    strand(engine, run_id, version=1)
    with engine.connect() as conn:
        claim = leases.claim(conn, "worker-with-the-definition", 30.0, run_id)
        assert claim is not None
        assert segments.record_step(conn, claim, [{"step": "one", "output": 1}], "two")
    db.execute(
        engine,
        "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' WHERE run_id = :r",
        r=run_id,
    )
    assert [r.run_id for r in sweeps.reap_once(engine, settings)] == [run_id]

    # When it is stranded again
    strand(engine, run_id)
    age_hand_backs(engine, run_id, 0)

    # Then its first new hand-back starts a new count: it is handed back, not failed
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED
    assert db.run(engine, run_id)["status"] == "PENDING"


def test_a_run_whose_digest_changed_is_failed_the_same_way(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    db.execute(
        engine,
        "UPDATE awooop_run_state SET workflow_digest = :d WHERE run_id = :r",
        d="0" * 64,
        r=run_id,
    )
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED
    age_hand_backs(engine, run_id, LIMIT)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED
    assert db.run(engine, run_id)["failure_code"] == "E-RUN-003"
