"""Wait steps over a real PostgreSQL: durable sleeps and waits for signals.

While a run waits it is PENDING with no lease and no worker, until its signal wakes it or
its timer falls due. The races — a signal against the wait's own write, against the wait's
timeout, against a cancel, and two deliveries of one signal — are each forced: one side is
held on a gate (or on the run row's lock) while the other commits.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import Engine, text

from awooop import db as awooop_db
from awooop.channels.base import digest
from awooop.engine import runner
from awooop.store import signals
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf

Outcome = runner.Outcome


def send(
    engine: Engine,
    project: dict,
    run_id: uuid.UUID,
    name: str = "resolved",
    signal_id: str | None = None,
    payload: dict[str, Any] | None = None,
) -> signals.Delivery:
    body = payload if payload is not None else {"by": "test"}
    with engine.connect() as conn:
        return signals.deliver(
            conn,
            project["project_id"],
            run_id,
            name,
            signal_id or uuid.uuid4().hex,
            body,
            digest(body),
        )


def forward(row: dict, step: str) -> list[dict]:
    return [e for e in row["saga_steps"] if e["phase"] == "forward" and e["step"] == step]


def test_a_sleep_releases_the_worker_and_its_timer_resumes_the_run(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-sleep")

    assert runner.execute(engine, settings, run_id) == Outcome.WAITING
    row = db.run(engine, run_id)
    assert (row["status"], row["lease_until"], row["worker_id"]) == ("PENDING", None, None)
    assert [e["status"] for e in forward(row, "nap")] == ["WAITING"]
    # not claimable before its time: a message sent meanwhile is a no-op
    assert runner.execute(engine, settings, run_id) == Outcome.NOT_CLAIMED

    waiting.fire_when_due(engine, settings, run_id, "retry")
    assert runner.execute(engine, settings, run_id) == Outcome.COMPLETED
    row = db.run(engine, run_id)
    assert forward(row, "nap")[-1]["output"] == {"slept_seconds": 0.3}
    assert wf.CALLS[str(run_id)] == ["do:a", "do:after"]


def test_a_sleeping_run_claimed_early_sleeps_on_until_the_same_end(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-sleep")
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING
    until = forward(db.run(engine, run_id), "nap")[0]["until"]

    # An early nudge (an operator's resume makes a run claimable at once, say)
    with engine.connect() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET available_at = now() WHERE run_id = :r"),
            {"r": run_id},
        )

    assert runner.execute(engine, settings, run_id) == Outcome.WAITING
    entries = forward(db.run(engine, run_id), "nap")
    assert [e["status"] for e in entries] == ["WAITING", "WAITING"]
    assert entries[1]["until"] == until
    assert entries[1]["delay"] < entries[0]["delay"]


def test_a_signal_wakes_the_run_waiting_for_it(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING
    row = db.run(engine, run_id)
    assert (row["status"], row["lease_until"], row["current_step"]) == ("PENDING", None, "wait")
    assert runner.execute(engine, settings, run_id) == Outcome.NOT_CLAIMED

    delivery = send(engine, project, run_id, payload={"alert": "db-1"}, signal_id="s-1")

    assert delivery.outcome == "delivered"
    assert runner.execute(engine, settings, run_id) == Outcome.COMPLETED
    row = db.run(engine, run_id)
    taken = forward(row, "wait")[-1]["output"]
    assert {k: taken[k] for k in ("signal", "received", "signal_id", "payload")} == {
        "signal": "resolved",
        "received": True,
        "signal_id": "s-1",
        "payload": {"alert": "db-1"},
    }
    assert row["output"]["saw"]["payload"] == {"alert": "db-1"}


def test_a_signal_sent_before_the_wait_is_kept_for_it(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")

    assert send(engine, project, run_id).outcome == "kept"

    assert runner.execute(engine, settings, run_id) == Outcome.COMPLETED
    assert wf.CALLS[str(run_id)] == ["do:a", "do:after"]


def test_a_redelivered_signal_is_kept_once_and_taken_once(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-twice")
    first = send(engine, project, run_id, "ping", "same-id", {"n": 1})
    again = send(engine, project, run_id, "ping", "same-id", {"n": 1})
    other = send(engine, project, run_id, "ping", "same-id", {"n": 2})

    assert (first.outcome, again.outcome, other.outcome) == ("kept", "duplicate", "conflict")
    assert db.count(engine, "awooop_signal", "run_id = :r", r=run_id) == 1
    # the first wait takes it; the second has none and waits
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING
    row = db.run(engine, run_id)
    assert forward(row, "first")[-1]["output"]["signal_id"] == "same-id"
    assert forward(row, "second")[-1]["status"] == "WAITING"


def test_a_finished_run_takes_no_signal(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    send(engine, project, run_id)
    assert runner.execute(engine, settings, run_id) == Outcome.COMPLETED

    assert send(engine, project, run_id).outcome == "finished"
    assert db.count(engine, "awooop_signal", "run_id = :r", r=run_id) == 1


def test_a_wait_that_times_out_rejects_the_step_and_compensates(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-timeout")
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING

    waiting.fire_when_due(engine, settings, run_id, "retry")
    assert runner.execute(engine, settings, run_id) == Outcome.FAILED

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "FAILED",
        "COMPENSATED",
        "E-STEP-005",
    )
    assert wf.CALLS[str(run_id)] == ["do:a", "undo:a"]


def test_a_signal_that_misses_its_wait_is_kept_for_the_next_wait_of_its_name(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-twice")
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING
    waiting.fire_when_due(engine, settings, run_id, "retry")
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING  # "first" went on

    assert send(engine, project, run_id, "ping", "late").outcome == "delivered"
    assert runner.execute(engine, settings, run_id) == Outcome.COMPLETED
    row = db.run(engine, run_id)
    assert forward(row, "first")[-1]["output"] == {"signal": "ping", "received": False}
    assert forward(row, "second")[-1]["output"]["signal_id"] == "late"


# --- Races ---------------------------------------------------------------------------------


@pytest.fixture
def held_lookup(monkeypatch):
    """Holds a worker just after its wait step looked for its signal, until released."""
    looked, release = threading.Event(), threading.Event()
    real = signals.next_for_wait

    def gated(conn, run_id, name, after):
        found = real(conn, run_id, name, after)
        looked.set()
        assert release.wait(timeout=20)
        return found

    monkeypatch.setattr(signals, "next_for_wait", gated)
    return looked, release


def test_a_signal_committed_between_the_lookup_and_the_wait_wakes_the_run(
    engine, project, settings, held_lookup
):
    # Given a worker that looked for the signal (none yet) and is about to wait
    looked, release = held_lookup
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    worker, outcome = test_runs.execute_in_thread(engine, settings, run_id)
    assert looked.wait(timeout=20)

    # When the signal commits before the wait is written (the run is still RUNNING: kept)
    assert send(engine, project, run_id).outcome == "kept"
    release.set()
    worker.join(timeout=20)

    # Then the wait saw it: the run is claimable at once and its message is to be sent
    assert outcome == [Outcome.WOKEN]
    row = db.run(engine, run_id)
    assert row["status"] == "PENDING"
    assert db.rows(
        engine,
        "SELECT available_at <= now() AS due FROM awooop_run_state WHERE run_id = :r",
        r=run_id,
    )[0]["due"]
    assert runner.execute(engine, settings, run_id) == Outcome.COMPLETED


def test_a_signal_that_holds_the_run_row_while_the_wait_is_written_is_seen_by_it(
    engine, project, settings, held_lookup
):
    # Given a worker about to write its wait, and a delivery that has locked the run row and
    # kept its signal but not committed yet
    looked, release = held_lookup
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    worker, outcome = test_runs.execute_in_thread(engine, settings, run_id)
    assert looked.wait(timeout=20)
    body = {"by": "test"}
    with awooop_db.transaction(engine) as conn:
        assert (
            signals.deliver(
                conn, project["project_id"], run_id, "resolved", "held", body, digest(body)
            ).outcome
            == "kept"
        )
        release.set()
        waiting.until(
            lambda: waiting.blocked_on_lock(engine, "AS yes"),
            what="the wait blocked on the run row",
        )
    # When the delivery commits while the wait waits for the row
    worker.join(timeout=20)

    # Then the wait's statement, taken after the lock, saw the signal
    assert outcome == [Outcome.WOKEN]
    assert runner.execute(engine, settings, run_id) == Outcome.COMPLETED
    assert forward(db.run(engine, run_id), "wait")[-1]["output"]["signal_id"] == "held"


def test_a_signal_against_the_waits_timeout_is_never_lost(engine, project, settings, held_lookup):
    # Given a wait whose time is up, its worker having looked (no signal) and about to write
    looked, release = held_lookup
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-twice")
    release.set()
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING
    waiting.fire_when_due(engine, settings, run_id, "retry")
    looked.clear()
    release.clear()
    worker, outcome = test_runs.execute_in_thread(engine, settings, run_id)
    assert looked.wait(timeout=20)

    # When the signal commits before the timeout is recorded
    assert send(engine, project, run_id, "ping", "racer").outcome == "kept"
    release.set()
    worker.join(timeout=20)

    # Then the first wait ended without it, and the signal was kept: the next wait takes it
    row = db.run(engine, run_id)
    assert forward(row, "first")[-1]["output"] == {"signal": "ping", "received": False}
    assert outcome == [Outcome.COMPLETED]
    assert forward(row, "second")[-1]["output"]["signal_id"] == "racer"


def test_a_cancel_while_the_wait_takes_its_signal_turns_the_run_back(
    engine, project, settings, held_lookup
):
    # Given a worker whose wait found its signal and is about to record it
    looked, release = held_lookup
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    send(engine, project, run_id)
    worker, outcome = test_runs.execute_in_thread(engine, settings, run_id)
    assert looked.wait(timeout=20)

    # When an operator cancels meanwhile
    assert test_runs.operate(engine, settings, project, "cancel", run_id).applied
    release.set()
    worker.join(timeout=20)

    # Then the wait's outcome is kept, the run is compensated, and no later step ran
    assert outcome == [Outcome.CANCELLED]
    row = db.run(engine, run_id)
    assert (row["status"], row["failure_code"]) == ("CANCELLED", "E-SAGA-002")
    assert forward(row, "wait")[-1]["status"] == "SUCCEEDED"
    assert wf.CALLS[str(run_id)] == ["do:a", "undo:a"]


def test_a_cancel_of_a_waiting_run_compensates_without_waiting_for_the_signal(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING

    assert test_runs.operate(engine, settings, project, "cancel", run_id).applied
    assert runner.execute(engine, settings, run_id) == Outcome.CANCELLED

    assert send(engine, project, run_id).outcome == "finished"
    assert wf.CALLS[str(run_id)] == ["do:a", "undo:a"]


def test_two_deliveries_of_one_signal_keep_it_once(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    assert runner.execute(engine, settings, run_id) == Outcome.WAITING
    results: list[signals.Delivery] = []

    # Given the run row held, so that both deliveries wait for it at once
    with awooop_db.transaction(engine) as holder:
        holder.execute(
            text("SELECT 1 FROM awooop_run_state WHERE run_id = :r FOR UPDATE"), {"r": run_id}
        )
        threads = [
            threading.Thread(
                target=lambda: results.append(send(engine, project, run_id, signal_id="twin"))
            )
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        waiting.until(
            lambda: (
                db.rows(
                    engine,
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%INSERT INTO awooop_signal%'",
                )[0]["n"]
                == 2
            ),
            what="both deliveries waiting for the run row",
        )
    for t in threads:
        t.join(timeout=20)

    assert sorted(d.outcome for d in results) == ["delivered", "duplicate"]
    assert db.count(engine, "awooop_signal", "run_id = :r", r=run_id) == 1
    assert runner.execute(engine, settings, run_id) == Outcome.COMPLETED
