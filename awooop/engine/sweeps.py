"""The maintenance passes beat runs. They only move state; they never execute steps.

Each ``*_once`` function is one pass, safe to run twice concurrently (its statement locks
with SKIP LOCKED), and returns what it did; the Celery task logs non-zero counts and sends
the nudges for runs that became claimable.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Connection, Engine

from awooop import db, metrics
from awooop.config import Settings
from awooop.domain import states
from awooop.engine import identity, watch
from awooop.store import approvals, dedupe, reaper, retention, timers, workers

log = logging.getLogger("awooop.engine.sweeps")


def reap_once(
    engine: Engine,
    settings: Settings | None = None,
    watcher: watch.WorkerWatch | None = None,
    prune: bool = True,
) -> list[reaper.Reaped]:
    """Runs whose lease expired, or whose worker this process's watch judged dead
    (:mod:`awooop.engine.watch`), back to PENDING (or FAILED when attempts are exhausted).
    Then, with ``prune``, liveness rows of workers gone for long are deleted."""
    settings = settings or Settings()
    watcher = watcher or watch.watch(settings.worker_dead_after_seconds)
    try:
        with engine.connect() as conn:
            watcher.observe(*_tokens(conn))
            reaped = reaper.reap(conn, actor=identity.worker_id(), dead=watcher.dead())
    except Exception:
        watcher.forget()
        raise
    for r in reaped:
        outcome = "requeued" if r.to_status == states.PENDING else "failed"
        metrics.REAPER_RECOVERIES.labels(outcome).inc()
        if r.to_status == states.FAILED:
            metrics.RUNS_FINISHED.labels(states.FAILED).inc()
            metrics.run_finished(r.workflow_name, states.FAILED, reaper.EXHAUSTED, r.age_seconds)
        log.warning(
            "stale run reaped",
            extra={
                "action": "run_reaped",
                "run_id": str(r.run_id),
                "project_id": r.project_id,
                "to_status": r.to_status,
                "attempt": r.attempt_count,
                "lost_worker_id": r.lost_worker_id,
                "reason": r.reason,
            },
        )
    if prune:
        with engine.connect() as conn:
            pruned = workers.prune(conn, settings.worker_prune_after_seconds)
        if pruned:
            log.info(
                "liveness rows of departed workers pruned",
                extra={"action": "workers_pruned", "count": pruned},
            )
    return reaped


def _tokens(conn: Connection) -> tuple[str, dict[str, datetime]]:
    tokens = reaper.liveness_tokens(conn)
    return tokens.server, tokens.seen


def orphans_once(engine: Engine, settings: Settings) -> list[uuid.UUID]:
    """Claimable runs nobody claimed within ``orphan_after_seconds``: their message is re-sent."""
    with engine.connect() as conn:
        orphans = reaper.mark_orphans(
            conn, settings.orphan_after_seconds, settings.orphan_batch_size
        )
    if orphans:
        log.warning(
            "unclaimed runs found; re-sending their messages",
            extra={"action": "orphans_resent", "count": len(orphans)},
        )
    return orphans


def prune_dedupe_once(
    engine: Engine, settings: Settings, clock: Callable[[], float] = time.monotonic
) -> int:
    """Delete dedupe rows past their TTL, one batch per transaction, until none is left or
    ``sweep_pass_seconds`` have gone by (the next pass goes on)."""
    deadline = clock() + settings.sweep_pass_seconds
    total = 0
    while True:
        with engine.connect() as conn:
            deleted = dedupe.prune_batch(
                conn, settings.dedupe_ttl_seconds, settings.prune_batch_size
            )
        total += deleted
        if deleted < settings.prune_batch_size or clock() >= deadline:
            break
    if total:
        log.info(
            "dedupe rows pruned",
            extra={
                "action": "dedupe_pruned",
                "count": total,
                "more_left": deleted == settings.prune_batch_size,
            },
        )
    return total


def retention_once(
    engine: Engine, settings: Settings, clock: Callable[[], float] = time.monotonic
) -> dict[str, int]:
    """Delete finished runs past their retention (with every row that refers to them) and
    SENT / PARKED outbox messages past theirs, one batch per transaction, until none is left
    or ``sweep_pass_seconds`` have gone by (the next pass goes on). Returns the rows
    deleted by table; each batch is counted in ``awooop_retention_deleted_rows_total`` as
    soon as it has committed."""
    deadline = clock() + settings.sweep_pass_seconds
    batch = settings.retention_batch_size
    totals: dict[str, int] = {}
    runs_left = outbox_left = True
    rounds = 0
    while (runs_left or outbox_left) and (rounds == 0 or clock() < deadline):
        rounds += 1
        if runs_left:
            with engine.connect() as conn:
                deleted = retention.delete_finished_runs(
                    conn, settings.run_retention_days, settings.dedupe_ttl_seconds, batch
                )
            _count_deleted(totals, deleted.rows)
            runs_left = deleted.runs == batch
        if outbox_left:
            with engine.connect() as conn:
                messages = retention.delete_old_outbox(conn, settings.outbox_retention_days, batch)
            _count_deleted(totals, {"awooop_outbox": messages})
            outbox_left = messages == batch
    metrics.RETENTION_PASSES.labels("behind" if runs_left or outbox_left else "caught_up").inc()
    if any(totals.values()):
        log.info(
            "finished runs and old messages deleted",
            extra={
                "action": "retention_deleted",
                "runs": totals.get("awooop_run_state", 0),
                "rows": totals,
                "more_left": runs_left or outbox_left,
            },
        )
    return totals


def _count_deleted(totals: dict[str, int], rows: dict[str, int]) -> None:
    for table, n in rows.items():
        if n:
            metrics.RETENTION_DELETED.labels(table).inc(n)
            totals[table] = totals.get(table, 0) + n


def fire_due_timers_once(engine: Engine, settings: Settings) -> list[timers.FiredTimer]:
    """Fire every due timer, in batches; returns the fired ones whose run should be nudged.

    Each batch is one transaction: the timers are marked FIRED (or SKIPPED when stale) and
    their effects on the runs are applied together, so a crash loses neither. A retry timer's
    effect is only the nudge; a tool timeout records the missing result and frees the run.
    """
    fired: list[timers.FiredTimer] = []
    skipped = 0
    while True:
        expired: list[float] = []  # how long each approval this batch expired had waited
        with db.transaction(engine) as conn:
            batch = timers.fire_due(conn, identity.worker_id(), settings.timer_batch_size)
            for timer in batch:
                if not timer.fired:
                    skipped += 1
                    continue
                effect = timers.EFFECTS.get(timer.kind)
                if effect is not None and not effect(conn, timer):
                    continue
                if timer.kind == timers.APPROVAL_EXPIRY:
                    waited = approvals.expired_wait(conn, timer)
                    if waited is not None:
                        expired.append(waited)
                fired.append(timer)
        for timer in batch:  # committed: how late each timer fired, stale ones included
            metrics.TIMER_LATENESS.labels(timer.kind).observe(max(0.0, timer.late_by))
        for waited in expired:
            metrics.APPROVAL_WAIT.labels("expired").observe(waited)
        if len(batch) < settings.timer_batch_size:
            break
    if fired or skipped:
        log.info(
            "due timers fired",
            extra={
                "action": "timers_fired",
                "fired": len(fired),
                "skipped": skipped,
                "max_late_s": round(max((t.late_by for t in fired), default=0.0), 3),
            },
        )
    return fired
