"""The lease protocol (claim, renewal, fencing, the reaper; docs/protocol.md) against a real
PostgreSQL, with separate connections."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import replace

from sqlalchemy import text

from awooop.engine import runner, sweeps
from awooop.store import leases, reaper, segments
from tests.support import db, plans
from tests.support import runs as test_runs
from tests.support import workflows as test_workflows

SHORT_TTL = 0.2


def claim(engine, worker: str, run_id=None, ttl: float = 30.0):
    with engine.begin() as conn:
        return leases.claim(conn, worker, ttl, run_id)


def reap(engine):
    with engine.begin() as conn:
        return reaper.reap(conn, actor="test-reaper")


def expire_leases() -> None:
    time.sleep(SHORT_TTL + 0.1)


def entry(c: leases.Claim, step: str = "one") -> dict:
    return {
        "step": step,
        "index": 0,
        "phase": "forward",
        "attempt": 1,
        "claim": c.attempt_count,
        "lease_epoch": c.lease_epoch,
        "worker_id": c.worker_id,
        "status": "SUCCEEDED",
        "output": {"by": c.worker_id},
    }


def test_claim_takes_the_lease_and_bumps_attempt_and_epoch(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])

    c = claim(engine, "w1", run_id)

    assert (c.run_id, c.attempt_count, c.lease_epoch, c.worker_id) == (run_id, 1, 1, "w1")
    row = db.run(engine, run_id)
    assert row["status"] == "RUNNING" and row["worker_id"] == "w1"
    assert row["lease_until"] > row["heartbeat_at"]
    assert [e["trigger_id"] for e in db.events(engine, run_id)] == [None, "claim:1"]


def test_a_claim_by_run_id_reads_the_run_by_its_primary_key_however_many_are_pending(
    engine, project
):
    """A worker's message names its run: the claim finds it through the primary key, not by
    walking the claimable runs in order until it meets it — a cost that grew with the backlog,
    chosen by plans made before the table's first ANALYZE (a fresh database)."""
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.begin() as conn:
        # A table not analyzed yet, as in a fresh database, while 3,000 older runs arrive
        conn.execute(text("ALTER TABLE awooop_run_state SET (autovacuum_enabled = false)"))
        conn.execute(
            text(
                """
                INSERT INTO awooop_run_state
                SELECT (jsonb_populate_record(r, jsonb_build_object(
                    'run_id', gen_random_uuid(),
                    'available_at', r.available_at - make_interval(secs => n),
                    'created_at', r.created_at - make_interval(secs => n)))).*
                FROM awooop_run_state r, generate_series(1, 3000) AS n
                WHERE r.run_id = :run_id
                """
            ),
            {"run_id": run_id},
        )

    with engine.connect() as conn:
        leases.claim(conn, "warm-up", 30.0, uuid.uuid4())  # prepares it on this connection
        values = {"run_id": run_id, "lease_ttl": 30.0, "worker_id": "w1"}
        plan = plans.generic_plan(conn, leases._CLAIM_BY_ID, values)

    candidate = plan.split("CTE claimed")[0]  # the read that finds the run
    assert "Index Cond: (run_id = $" in candidate, plan  # a parameter: the generic plan
    assert "ix_awooop_run_state_claimable" not in candidate, plan
    c = claim(engine, "w1", run_id)
    assert c is not None and c.run_id == run_id


def test_a_fenced_write_reads_its_run_by_its_primary_key_however_many_are_running(engine, project):
    """Every segment write is fenced on the held lease (``status = 'RUNNING'`` among its
    conditions). It must find its run through the primary key, not through an index on
    ``status`` whose every RUNNING entry it would read and filter: a cost that grows with the
    runs held at once, chosen by plans made while statistics counted few of them."""
    run_id = test_runs.admit(engine, project["project_id"])
    c = claim(engine, "w1", run_id)
    # Statistics from before the burst (autovacuum has not analyzed since), then 600 runs
    # held by other workers
    plans.freeze_statistics(engine)
    plans.copy_run(engine, run_id, ["RUNNING"], 600)

    with engine.connect() as conn:
        stranger = replace(c, run_id=uuid.uuid4())  # prepares it on this connection
        assert segments.record_step(conn, stranger, [entry(c)], next_step="two") is None
        params = {
            **leases.fence_params(c),
            "entries": json.dumps([entry(c)]),
            "next_step": "two",
        }
        plan = plans.generic_plan(conn, segments._RECORD_STEP, params)

    assert "Index Cond: (run_id = $" in plan, plan  # a parameter: the generic plan
    assert "ix_awooop_run_state_unfinished" not in plan, plan
    with engine.begin() as conn:
        assert segments.record_step(conn, c, [entry(c)], next_step="two") is not None


def test_a_held_run_cannot_be_claimed_again(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "w1", run_id)

    assert claim(engine, "w2", run_id) is None
    assert claim(engine, "w2") is None


def test_renew_extends_the_lease_only_for_the_holder(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    c = claim(engine, "w1", run_id, ttl=5)
    before = db.run(engine, run_id)["lease_until"]

    with engine.begin() as conn:
        assert leases.renew(conn, c, lease_ttl=60)
        impostor = leases.Claim(**{**c.__dict__, "worker_id": "w2"})
        assert not leases.renew(conn, impostor, lease_ttl=600)

    assert db.run(engine, run_id)["lease_until"] > before


def test_ten_concurrent_workers_claim_every_run_exactly_once(engine, project):
    run_ids = set(test_runs.admit_many(engine, project["project_id"], 200))
    executed: list[uuid.UUID] = []
    lock = threading.Lock()
    start = threading.Barrier(10)
    errors: list[BaseException] = []

    def work(worker: str) -> None:
        try:
            start.wait()
            while True:
                c = claim(engine, worker)
                if c is None:
                    return
                with lock:
                    executed.append(c.run_id)
                with engine.begin() as conn:
                    assert segments.finish(
                        conn, c, [entry(c)], to_status="COMPLETED", saga_status="COMPLETED"
                    )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert errors == []
    assert Counter(executed) == Counter(run_ids)  # each run once, none twice
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT status, attempt_count, count(*) AS n FROM awooop_run_state "
                "GROUP BY status, attempt_count"
            )
        ).all()
        claims = conn.execute(
            text(
                "SELECT run_id, count(*) FROM awooop_run_event WHERE trigger_id LIKE 'claim:%' "
                "GROUP BY run_id HAVING count(*) <> 1"
            )
        ).all()
        workers = conn.execute(
            text("SELECT count(DISTINCT worker_id) FROM awooop_run_state")
        ).scalar_one()
    assert [(r.status, r.attempt_count, r.n) for r in rows] == [("COMPLETED", 1, 200)]
    assert claims == []
    assert workers > 1  # the work was really shared


def test_reaper_returns_an_expired_run_to_pending(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "w1", run_id, ttl=SHORT_TTL)
    expire_leases()

    [reaped] = reap(engine)

    assert (reaped.run_id, reaped.to_status, reaped.lost_worker_id) == (run_id, "PENDING", "w1")
    row = db.run(engine, run_id)
    assert (row["status"], row["lease_until"], row["worker_id"]) == ("PENDING", None, None)
    assert row["reaped_at"] is not None
    assert db.events(engine, run_id)[-1]["trigger"] == "reaper"


def test_reaper_leaves_live_leases_alone(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "w1", run_id, ttl=30)

    assert reap(engine) == []
    assert db.run(engine, run_id)["status"] == "RUNNING"


def test_reaper_never_touches_a_waiting_approval_run_with_an_expired_lease(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "w1", run_id, ttl=SHORT_TTL)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET status = 'WAITING_APPROVAL' WHERE run_id = :r"),
            {"r": run_id},
        )
    expire_leases()
    before = db.run(engine, run_id)

    assert reap(engine) == []
    assert db.run(engine, run_id) == before


def test_attempts_exhausted_fail_the_run(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])  # max_attempts = 3
    outcomes = []
    for attempt in range(3):
        c = claim(engine, f"w{attempt}", run_id, ttl=SHORT_TTL)
        assert c.attempt_count == attempt + 1
        expire_leases()
        outcomes += [r.to_status for r in reap(engine)]

    assert outcomes == ["PENDING", "PENDING", "FAILED"]
    row = db.run(engine, run_id)
    assert (row["status"], row["failure_reason"], row["attempt_count"]) == (
        "FAILED",
        "Max retry attempts exceeded",
        3,
    )
    assert claim(engine, "w9", run_id) is None


def test_two_reapers_at_once_reap_each_run_once(engine, project):
    run_ids = test_runs.admit_many(engine, project["project_id"], 60)
    for run_id in run_ids:
        claim(engine, "w1", run_id, ttl=SHORT_TTL)
    expire_leases()
    results: list[list[reaper.Reaped]] = []
    start = threading.Barrier(2)

    def reaper() -> None:
        start.wait()
        results.append(reap(engine))

    threads = [threading.Thread(target=reaper) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    reaped = [r.run_id for batch in results for r in batch]
    assert sorted(reaped) == sorted(run_ids)
    assert db.count(engine, "awooop_run_event", "trigger = 'reaper'") == 60


def test_stale_claim_cannot_record_after_the_run_was_reclaimed(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    stale = claim(engine, "w1", run_id, ttl=SHORT_TTL)
    expire_leases()
    reap(engine)
    fresh = claim(engine, "w2", run_id)

    with engine.begin() as conn:
        assert not leases.renew(conn, stale, lease_ttl=30)
        assert not segments.record_step(conn, stale, [entry(stale)], next_step="two")
        assert not segments.finish(
            conn, stale, [entry(stale)], to_status="COMPLETED", saga_status="COMPLETED"
        )
        assert segments.record_step(conn, fresh, [entry(fresh)], next_step="two")

    journal = db.run(engine, run_id)["saga_steps"]
    assert [e["worker_id"] for e in journal] == ["w2"]


def test_worker_whose_lease_was_reaped_stops_and_its_late_result_is_not_recorded(
    engine, project, settings
):
    # Given a worker running a step that outlives its lease (no heartbeat in between)
    gate = uuid.uuid4().hex
    test_workflows.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-gated", {"gate": gate})
    short = settings.__class__(
        **{**settings.__dict__, "lease_ttl_seconds": SHORT_TTL, "heartbeat_interval_seconds": 60.0}
    )
    outcome: list[runner.Outcome] = []
    worker_a = threading.Thread(
        target=lambda: outcome.append(runner.execute(engine, short, run_id))
    )
    worker_a.start()
    deadline = time.monotonic() + 10
    while db.run(engine, run_id)["status"] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.02)

    # When the reaper takes the run back and another worker claims it
    expire_leases()
    assert [r.to_status for r in sweeps.reap_once(engine)] == ["PENDING"]
    fresh = claim(engine, "worker-b", run_id)
    test_workflows.GATES[gate].set()
    worker_a.join(timeout=10)

    # Then worker A's heartbeat matches no row, it stops, and writes nothing
    assert test_workflows.LEASE_HELD_AFTER_GATE[gate] is False
    assert outcome == [runner.Outcome.LEASE_LOST]
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"], row["lease_epoch"]) == (
        "RUNNING",
        "worker-b",
        fresh.lease_epoch,
    )
    assert row["saga_steps"] == []


def test_runner_completes_a_run_and_records_each_step(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")

    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("COMPLETED", "COMPLETED")
    assert [(e["step"], e["status"]) for e in row["saga_steps"]] == [
        ("one", "SUCCEEDED"),
        ("two", "SUCCEEDED"),
        ("three", "SUCCEEDED"),
    ]
    kinds = [(e["kind"], e["to_status"]) for e in db.events(engine, run_id)]
    # Step records live in the journal; the history holds the transitions.
    assert kinds == [("transition", "PENDING"), ("lease", "RUNNING"), ("transition", "COMPLETED")]


def test_runner_does_not_rerun_steps_recorded_before_a_crash(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    first = claim(engine, "crashed-worker", run_id, ttl=SHORT_TTL)
    with engine.begin() as conn:
        segments.record_step(conn, first, [entry(first, "one")], next_step="two")
    expire_leases()
    reap(engine)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    journal = db.run(engine, run_id)["saga_steps"]
    assert [(e["step"], e["claim"]) for e in journal] == [("one", 1), ("two", 2), ("three", 2)]


def test_a_failing_step_without_retries_fails_the_run_with_its_error(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-fail")

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "FAILED",
        "COMPENSATED",
        "E-STEP-002",
    )
    assert "the downstream service said no" in row["failure_reason"]
    journal = row["saga_steps"]
    assert [(e["phase"], e.get("status")) for e in journal] == [
        ("forward", "SUCCEEDED"),
        ("forward", "FAILED"),
        ("plan", None),
    ]
    assert journal[2]["steps"] == []  # nothing succeeded that has a compensation


def test_a_duplicate_message_for_a_finished_run_does_nothing(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    runner.execute(engine, settings, run_id)
    before = db.events(engine, run_id)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.NOT_CLAIMED
    assert db.events(engine, run_id) == before


def test_a_run_whose_workflow_this_worker_lacks_is_handed_back(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET workflow_version = 99 WHERE run_id = :r"),
            {"r": run_id},
        )

    assert runner.execute(engine, settings, run_id) == runner.Outcome.RELEASED

    row = db.run(engine, run_id)
    assert (row["status"], row["attempt_count"], row["worker_id"]) == ("PENDING", 0, None)
    assert row["available_at"] > row["updated_at"]
