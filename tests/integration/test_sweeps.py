"""Orphan re-send and dedupe pruning against a real PostgreSQL."""

from __future__ import annotations

import itertools

from sqlalchemy import text

from awooop.engine import sweeps
from awooop.store import leases
from tests.support import db
from tests.support import runs as test_runs


def settings_with(settings, **changes):
    return settings.__class__(**{**settings.__dict__, **changes})


def test_orphan_sweep_finds_claimable_runs_whose_message_is_old(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"])

    assert sweeps.orphans_once(engine, settings_with(settings, orphan_after_seconds=60)) == []
    assert sweeps.orphans_once(engine, settings_with(settings, orphan_after_seconds=0)) == [run_id]
    # Marked as re-sent: not found again until it is old once more.
    assert sweeps.orphans_once(engine, settings_with(settings, orphan_after_seconds=60)) == []


def test_orphan_sweep_ignores_held_and_finished_runs(engine, project, settings):
    held = test_runs.admit(engine, project["project_id"])
    with engine.begin() as conn:
        leases.claim(conn, "w1", 30, held)
        conn.execute(text("UPDATE awooop_run_state SET enqueued_at = now() - interval '1 hour'"))

    assert sweeps.orphans_once(engine, settings_with(settings, orphan_after_seconds=0)) == []


def test_orphan_sweep_respects_its_batch_size(engine, project, settings):
    test_runs.admit_many(engine, project["project_id"], 5)
    with engine.begin() as conn:
        conn.execute(text("UPDATE awooop_run_state SET enqueued_at = now() - interval '1 hour'"))
    tuned = settings_with(settings, orphan_after_seconds=60, orphan_batch_size=2)

    assert [len(sweeps.orphans_once(engine, tuned)) for _ in range(4)] == [2, 2, 1, 0]


def test_prune_deletes_only_dedupe_rows_past_their_ttl_in_batches(engine, project, settings):
    test_runs.admit_many(engine, project["project_id"], 3)
    old = test_runs.admit_many(engine, project["project_id"], 7)
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE awooop_channel_event_dedupe SET created_at = now() - "
                "interval '8 days' WHERE run_id = ANY(:ids)"
            ),
            {"ids": old},
        )

    pruned = sweeps.prune_dedupe_once(engine, settings_with(settings, prune_batch_size=2))

    assert pruned == 7
    assert db.count(engine, "awooop_channel_event_dedupe") == 3
    assert db.count(engine, "awooop_run_state") == 10  # runs are kept


def test_a_prune_pass_stops_when_its_time_is_up_and_the_next_goes_on(engine, project, settings):
    old = test_runs.admit_many(engine, project["project_id"], 5)
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE awooop_channel_event_dedupe SET created_at = now() - "
                "interval '8 days' WHERE run_id = ANY(:ids)"
            ),
            {"ids": old},
        )
    small = settings_with(settings, prune_batch_size=2, sweep_pass_seconds=10.0)

    # A clock that has run out after the first batch
    out_of_time = itertools.chain([0.0], itertools.repeat(100.0))
    assert sweeps.prune_dedupe_once(engine, small, clock=lambda: next(out_of_time)) == 2
    assert db.count(engine, "awooop_channel_event_dedupe") == 3

    assert sweeps.prune_dedupe_once(engine, small) == 3
    assert db.count(engine, "awooop_channel_event_dedupe") == 0


def test_default_dedupe_ttl_is_seven_days(settings):
    assert settings.dedupe_ttl_seconds == 7 * 24 * 3600
