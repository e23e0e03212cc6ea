"""A dead worker loses its runs quickly (DESIGN §9.5), a live one never does: the reaper also
takes RUNNING runs whose holder's liveness row (``awooop_worker``, renewed by the lease keeper
every few seconds) has gone stale, long before their lease expires."""

from __future__ import annotations

import time

from sqlalchemy import Engine, text

from awooop.engine import lease
from awooop.store import leases, reaper, workers
from tests.support import db
from tests.support import runs as test_runs
from tests.support.waiting import until

DEAD_AFTER = 20.0
LONG_TTL = 300.0  # the default lease: these runs' leases never expire during a test


def claim(engine: Engine, worker: str, run_id: object) -> leases.Claim:
    with engine.connect() as conn:
        c = leases.claim(conn, worker, LONG_TTL, run_id)
    assert c is not None
    return c


def seen(engine: Engine, worker: str, seconds_ago: float) -> None:
    """``worker``'s liveness row, last renewed ``seconds_ago`` by the database clock."""
    with engine.connect() as conn:
        workers.beat(conn, worker)
        conn.execute(
            text(
                "UPDATE awooop_worker SET seen_at = now() - make_interval(secs => :ago) "
                "WHERE worker_id = :w"
            ),
            {"w": worker, "ago": seconds_ago},
        )


def reap(engine: Engine, dead_after: float = DEAD_AFTER, batch_size: int = 1000) -> list:
    with engine.connect() as conn:
        return reaper.reap(
            conn, actor="test-reaper", batch_size=batch_size, worker_dead_after=dead_after
        )


def reaper_events(engine: Engine, run_id: object) -> list[dict]:
    return [e for e in db.events(engine, run_id) if e["trigger"] == "reaper"]


def test_a_run_whose_worker_stopped_renewing_its_liveness_is_requeued_before_its_lease_expires(
    engine, project
):
    # Given a run held under a 5-minute lease by a worker last seen a minute ago
    run_id = test_runs.admit(engine, project["project_id"])
    c = claim(engine, "dead-worker", run_id)
    seen(engine, "dead-worker", 60)

    reaped = reap(engine)

    assert [(r.run_id, r.to_status, r.lost_worker_id) for r in reaped] == [
        (run_id, "PENDING", "dead-worker")
    ]
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"], row["lease_until"]) == ("PENDING", None, None)
    [event] = reaper_events(engine, run_id)
    assert event["trigger_id"] == f"reap:{c.lease_epoch}"
    assert event["detail"]["reason"] == "worker_dead"
    assert event["detail"]["lost_worker_id"] == "dead-worker"
    # The run is claimable at once, by anyone.
    assert claim(engine, "other-worker", run_id).attempt_count == 2


def test_a_dead_workers_run_with_its_attempts_exhausted_fails(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "dead-worker", run_id)
    with engine.connect() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET attempt_count = max_attempts WHERE run_id = :r"),
            {"r": run_id},
        )
    seen(engine, "dead-worker", 60)

    assert [r.to_status for r in reap(engine)] == ["FAILED"]
    row = db.run(engine, run_id)
    assert (row["status"], row["failure_code"]) == ("FAILED", "E-LEASE-001")
    assert reaper_events(engine, run_id)[0]["detail"]["reason"] == "worker_dead"


def test_an_expired_lease_is_still_reaped_and_says_so(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        leases.claim(conn, "slow-worker", 0.05, run_id)
    seen(engine, "slow-worker", 0)
    until(lambda: db.run(engine, run_id)["lease_until"] < _db_now(engine), 5, "the lease to pass")

    assert [r.to_status for r in reap(engine)] == ["PENDING"]
    assert reaper_events(engine, run_id)[0]["detail"]["reason"] == "lease_expired"


def test_a_worker_seen_recently_keeps_its_run(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "live-worker", run_id)
    seen(engine, "live-worker", DEAD_AFTER - 5)

    assert reap(engine) == []
    assert db.run(engine, run_id)["status"] == "RUNNING"


def test_a_worker_with_no_liveness_row_is_left_to_its_lease(engine, project):
    # An older worker version writes no liveness row: only its lease speaks for it.
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "old-version-worker", run_id)
    seen(engine, "someone-else", 3600)

    assert reap(engine) == []
    assert db.run(engine, run_id)["worker_id"] == "old-version-worker"


def test_a_live_worker_whose_step_runs_for_many_liveness_intervals_is_never_taken_over(
    engine, project
):
    # Given a worker whose keeper renews its liveness every 0.2 s, judged dead after 1 s
    run_id = test_runs.admit(engine, project["project_id"])
    c = claim(engine, "live-worker", run_id)
    keeper = lease.LeaseKeeper(liveness_interval=0.2)
    held = lease.Lease(engine, c, LONG_TTL, 30.0)
    keeper.hold(held)
    try:
        until(lambda: _seen_at(engine, "live-worker") is not None, 5, "a first liveness row")
        last = _seen_at(engine, "live-worker")

        # When its step runs for five times the dead-after threshold, reapers passing often
        passes = 0
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            assert reap(engine, dead_after=1.0) == []
            passes += 1
            last = _next_renewal(engine, "live-worker", last)
    finally:
        keeper.drop(held)
        keeper.close()

    # Then no pass took the run, and the row says who and where the worker is
    assert passes >= 5
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"]) == ("RUNNING", "live-worker")
    assert not held.lost.is_set()
    [liveness] = db.rows(engine, "SELECT * FROM awooop_worker WHERE worker_id = 'live-worker'")
    assert liveness["pid"] > 0 and liveness["host"]
    assert liveness["started_at"] <= liveness["seen_at"]


def test_two_concurrent_reapers_take_disjoint_runs_of_a_dead_worker(engine, project):
    # Given six runs of a dead worker
    run_ids = set(test_runs.admit_many(engine, project["project_id"], 6))
    for run_id in run_ids:
        claim(engine, "dead-worker", run_id)
    seen(engine, "dead-worker", 60)

    # When one reaper has taken three and not committed yet, and a second one passes
    with engine.connect() as held_conn:
        txn = held_conn.begin()
        held_conn.execute(text("SET LOCAL lock_timeout = '5s'"))
        first = reaper.reap(held_conn, actor="reaper-1", batch_size=3, worker_dead_after=DEAD_AFTER)
        second = reap(engine)
        txn.commit()

    # Then they took disjoint runs, all of them, each recorded once
    taken_first = {r.run_id for r in first}
    taken_second = {r.run_id for r in second}
    assert len(taken_first) == 3 and taken_first.isdisjoint(taken_second)
    assert taken_first | taken_second == run_ids
    assert reap(engine) == []
    for run_id in run_ids:
        assert len(reaper_events(engine, run_id)) == 1


def test_liveness_rows_of_workers_gone_for_long_are_pruned(engine, project):
    # A row an hour old goes, unless its worker still holds a run (the reaper's to judge);
    # a recent row stays.
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "gone-but-holding", run_id)
    seen(engine, "gone-but-holding", 7200)
    seen(engine, "gone", 7200)
    seen(engine, "recent", 10)

    with engine.connect() as conn:
        assert workers.prune(conn, older_than=3600) == 1

    left = {r["worker_id"] for r in db.rows(engine, "SELECT worker_id FROM awooop_worker")}
    assert left == {"gone-but-holding", "recent"}


def _db_now(engine: Engine):
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


def _next_renewal(engine: Engine, worker: str, after: object):
    return until(
        lambda: _seen_at(engine, worker) != after and _seen_at(engine, worker), 2, "a renewal"
    )


def _seen_at(engine: Engine, worker: str):
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT seen_at FROM awooop_worker WHERE worker_id = :w"), {"w": worker}
        ).scalar_one_or_none()
