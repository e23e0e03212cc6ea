"""Scenario 7 — a long transaction on the runs table.

Runs of ``chaos-saga`` are delivered at a steady ``RATE`` (one in ten with a 2 s step, so
some are always RUNNING) through three phases: ``BEFORE``, ``DURING`` (two minutes at full
size; ``AWOOOP_CHAOS_SCALE`` scales the phases, never the recovery bound)
and ``AFTER``; eight runs with a 5 s step are admitted just before ``DURING`` so that every
worker process is running one when it starts. During ``DURING`` two sessions that look like
what operators leave open:

- **an operator's psql session holding row locks**: ``BEGIN; SELECT … FROM
  awooop_run_state WHERE status NOT IN (terminal) ORDER BY created_at LIMIT 20 FOR UPDATE``
  — the in-flight runs at that moment (RUNNING ones with a worker on them, PENDING ones
  waiting for a claim), then idle in transaction;
- **a long read-only transaction**: ``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT
  count(*) FROM awooop_run_state`` then idle — a report or ``pg_dump`` that holds the xmin
  horizon back, so vacuum cannot remove the dead row versions every claim and step leave.

Both end (ROLLBACK) after ``DURING``. Measured per phase: admission p50/p99 (the provider),
claims per second and the wait from admission to first claim (``awooop_run_event``), runs
finished per second; the dead tuples the snapshot kept. Asserted:

- admission keeps going: no 5xx, no delivery given up, p99 during within ``ADMISSION_P99_S``;
- claims keep going: claims/s during at least half of before, and the runs admitted during
  the lock (not locked themselves) are claimed within ``CLAIM_WAIT_P99_S`` (p99);
- recovery within a minute: every run admitted before the lock ended — the locked ones
  included — is terminal within 60 s of its end, and claims/s after are back to at least
  half of before;
- and, as everywhere: one run per event, no step completed twice, every effect recorded.
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import create_engine, text

from tests.chaos import checks
from tests.chaos.providers import Provider, api_event
from tests.chaos.report import scaled
from tests.support.processes import wait_until

RATE = 10.0
BEFORE = scaled(30, least=10)
DURING = scaled(120, least=24)
AFTER = scaled(60, least=20)
LOCKED_RUNS = 20
RECOVERY_BOUND = 60.0
ADMISSION_P99_S = 2.0
CLAIM_WAIT_P99_S = 10.0
WORKER_PROCESSES = 4  # two workers, two prefork children each
HELD_SLOW_RUNS = 8


def _phase(stack, provider: Provider, name: str, seconds: float, rng_start: int) -> list:
    deliveries = []
    for i in range(int(seconds * RATE)):
        payload: dict = {"n": rng_start + i, "phase": name}
        if i % 10 == 3:
            payload["slow"] = 2.0
        deliveries.append(api_event(stack.project, stack.new_key(name), payload))
    provider.deliver_all(deliveries)
    return deliveries


def _claims(engine, since, until) -> list[dict]:
    return checks.rows(
        engine,
        """
        SELECT e.run_id::text, e.at,
               extract(epoch FROM e.at - r.created_at)::float8 AS since_admission,
               e.trigger_id = 'claim:1' AS first
        FROM awooop_run_event e JOIN awooop_run_state r USING (run_id)
        WHERE e.kind = 'lease' AND e.trigger_id LIKE 'claim:%'
          AND e.at >= :since AND e.at < :until
        """,
        since=since,
        until=until,
    )


def _finished(engine, since, until) -> int:
    return checks.rows(
        engine,
        "SELECT count(*) AS n FROM awooop_run_state WHERE finished_at >= :s AND finished_at < :u",
        s=since,
        u=until,
    )[0]["n"]


def _dead_tuples(engine) -> int:
    return checks.rows(
        engine,
        "SELECT coalesce(n_dead_tup, 0) AS n FROM pg_stat_user_tables"
        " WHERE relname = 'awooop_run_state'",
    )[0]["n"]


@pytest.mark.timeout(900)
def test_long_transaction_slows_nothing_unbounded_and_recovers_within_a_minute(
    chaos_stack, figures
):
    figures.scenario("7", "A long transaction on the runs table")
    stack = chaos_stack.start()
    engine = stack.engine
    providers = {p: stack.provider(threads=8, redelivery_share=0.05, rate=RATE) for p in "bda"}

    t0 = checks.db_now(engine)
    before = _phase(stack, providers["b"], "before", BEFORE, 0)
    # Runs in flight when the operator locks: runs with a 5 s step, on every worker process.
    held = [
        api_event(stack.project, stack.new_key("held"), {"n": -i, "slow": 5.0})
        for i in range(1, HELD_SLOW_RUNS + 1)
    ]
    providers["b"].deliver_all(held)
    before += held
    wait_until(
        lambda: (
            checks.rows(
                engine, "SELECT count(*) AS n FROM awooop_run_state WHERE status = 'RUNNING'"
            )[0]["n"]
            >= WORKER_PROCESSES
        ),
        30,
        "every worker process running a slow run",
    )
    t1 = checks.db_now(engine)

    # The two sessions, on connections of their own with no timeouts (like psql).
    operator = create_engine(stack.database_url, pool_size=2)
    op_conn = operator.connect()
    op_tx = op_conn.begin()
    locked = [
        r[0]
        for r in op_conn.execute(
            text(
                "SELECT run_id::text FROM awooop_run_state"
                " WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')"
                " ORDER BY created_at LIMIT :n FOR UPDATE"
            ),
            {"n": LOCKED_RUNS},
        )
    ]
    locked_status = checks.rows(
        engine,
        "SELECT status, count(*) AS n FROM awooop_run_state WHERE run_id::text = ANY(:ids)"
        " GROUP BY 1",
        ids=locked,
    )
    reader = operator.connect().execution_options(isolation_level="REPEATABLE READ")
    read_tx = reader.begin()
    snapshot_rows = reader.execute(text("SELECT count(*) FROM awooop_run_state")).scalar_one()
    dead_at_start = _dead_tuples(engine)

    during = _phase(stack, providers["d"], "during", DURING, 100_000)
    time.sleep(max(0.0, DURING - (checks.db_now(engine) - t1).total_seconds()))
    # Let the statistics collector catch up before reading the dead tuples kept.
    time.sleep(1)
    dead_at_end = _dead_tuples(engine)
    ids_before_release = {d.run_id for d in before + during}
    read_tx.rollback()
    op_tx.rollback()
    reader.close()
    op_conn.close()
    operator.dispose()
    t2 = checks.db_now(engine)
    released = time.monotonic()

    # Recovery: every run admitted before the end of the lock terminal within a minute,
    # watched while the AFTER phase keeps delivering.
    recovered_in: list[float] = []
    locked_finished_in: list[float] = []

    def watch() -> None:
        deadline = released + RECOVERY_BOUND + 30
        while time.monotonic() < deadline:
            if not locked_finished_in and not checks.not_terminal(engine, locked):
                locked_finished_in.append(time.monotonic() - released)
            if not checks.not_terminal(engine, ids_before_release):
                recovered_in.append(time.monotonic() - released)
                return
            time.sleep(0.25)

    watcher = threading.Thread(target=watch, name="recovery")
    watcher.start()
    after = _phase(stack, providers["a"], "after", AFTER, 200_000)
    t3 = checks.db_now(engine)
    watcher.join()
    waited = checks.wait_terminal(engine, None, RECOVERY_BOUND)

    # Figures per phase.
    phases = {"before": (t0, t1), "during": (t1, t2), "after": (t2, t3)}
    admitted = {"before": before, "during": during, "after": after}
    stats = {}
    for name, (since, until) in phases.items():
        seconds = (until - since).total_seconds()
        claims = _claims(engine, since, until)
        ids = {d.run_id for d in admitted[name]} - set(locked)
        waits = [c["since_admission"] for c in claims if c["first"] and c["run_id"] in ids]
        stats[name] = {
            "seconds": seconds,
            "claims_per_s": len(claims) / seconds,
            "finished_per_s": _finished(engine, since, until) / seconds,
            "claim_wait_p50_s": checks.percentile(waits, 0.5),
            "claim_wait_p99_s": checks.percentile(waits, 0.99),
            **providers[name[0]].figures(),
        }

    doubles = checks.double_completions(engine)
    effects = checks.effects(engine, stack.recorder)
    all_deliveries = before + during + after
    run_ids = {d.run_id for d in all_deliveries}
    figures["runs"] = len(all_deliveries)
    figures["admission_rate_per_s"] = RATE
    figures["locked_runs"] = len(locked)
    figures["locked_runs_by_status_when_locked"] = {r["status"]: r["n"] for r in locked_status}
    figures["rows_in_the_long_snapshot"] = snapshot_rows
    for name, s in stats.items():
        figures[f"{name}_s"] = round(s["seconds"], 1)
        figures[f"{name}_admission_p50_ms"] = s["admission_p50_ms"]
        figures[f"{name}_admission_p99_ms"] = s["admission_p99_ms"]
        figures[f"{name}_claims_per_s"] = round(s["claims_per_s"], 2)
        figures[f"{name}_runs_finished_per_s"] = round(s["finished_per_s"], 2)
        figures[f"{name}_claim_wait_p50_s"] = round(s["claim_wait_p50_s"], 2)
        figures[f"{name}_claim_wait_p99_s"] = round(s["claim_wait_p99_s"], 2)
        figures[f"{name}_http_answers"] = s["http_answers"]
        figures[f"{name}_provider_retries"] = s["provider_retries"]
    figures.update(
        {
            "dead_tuples_at_lock_start": dead_at_start,
            "dead_tuples_at_lock_end": dead_at_end,
            "locked_runs_terminal_after_release_s": round(locked_finished_in[0], 1)
            if locked_finished_in
            else None,
            "runs_admitted_before_release_terminal_after_s": round(recovered_in[0], 1)
            if recovered_in
            else None,
            "recovery_bound_s": RECOVERY_BOUND,
            "waited_after_last_delivery_s": round(waited, 1),
            "runs_by_status": checks.status_counts(engine),
            "runs_failed_attempts_exhausted": checks.rows(
                engine,
                "SELECT count(*) AS n FROM awooop_run_state WHERE failure_reason LIKE 'Max retry%'",
            )[0]["n"],
            "claims_per_run": checks.attempts_histogram(engine),
            "steps_completed_twice": len(doubles),
            **effects.figures,
        }
    )

    # The operator's session really held runs that workers were running.
    assert figures["locked_runs_by_status_when_locked"].get("RUNNING", 0) >= 1, figures
    # Exactly one run per event; every run terminal and completed.
    assert None not in run_ids and len(run_ids) == len(all_deliveries)
    assert checks.status_counts(engine) == {"COMPLETED/COMPLETED": len(all_deliveries)}
    for name, s in stats.items():
        assert s["http_5xx"] == 0 and s["deliveries_given_up"] == 0, (name, s)
        assert s["redeliveries_answered_another_run"] == 0, (name, s)
    # Admission and claims keep going during the long transaction, with bounded latency.
    assert stats["during"]["admission_p99_ms"] <= ADMISSION_P99_S * 1000, stats["during"]
    assert stats["during"]["claims_per_s"] >= 0.5 * stats["before"]["claims_per_s"], stats
    assert stats["during"]["claim_wait_p99_s"] <= CLAIM_WAIT_P99_S, stats["during"]
    # Recovery within a minute of its end.
    assert recovered_in and recovered_in[0] <= RECOVERY_BOUND, recovered_in
    assert stats["after"]["claims_per_s"] >= 0.5 * stats["before"]["claims_per_s"], stats
    assert doubles == []
    assert effects.missing == []
    assert effects.unknown == []
