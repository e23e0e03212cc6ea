"""Maintenance tasks run by beat on the ``maintenance`` queue."""

from __future__ import annotations

from awooop import db
from awooop.config import get_settings
from awooop.domain import states
from awooop.engine import schedules, sweeps
from awooop.tasks import runs
from awooop.tasks.app import app


@app.task(name="awooop.sweeps.reap")
def reap() -> dict[str, int]:
    reaped = sweeps.reap_once(db.get_engine(db.SWEEPS), get_settings())
    requeued = [r.run_id for r in reaped if r.to_status == states.PENDING]
    runs.enqueue(requeued)
    return {"requeued": len(requeued), "failed": len(reaped) - len(requeued)}


@app.task(name="awooop.sweeps.watch_workers")
def watch_workers() -> dict[str, int]:
    """The reaper's look at worker liveness, more often than its full pass: a dead worker's
    runs move within about dead_after + 2 watch intervals."""
    reaped = sweeps.reap_once(db.get_engine(db.SWEEPS), get_settings(), prune=False)
    requeued = [r.run_id for r in reaped if r.to_status == states.PENDING]
    runs.enqueue(requeued)
    return {"requeued": len(requeued), "failed": len(reaped) - len(requeued)}


@app.task(name="awooop.sweeps.resend_orphans")
def resend_orphans() -> int:
    return runs.enqueue(sweeps.orphans_once(db.get_engine(db.SWEEPS), get_settings()))


@app.task(name="awooop.sweeps.prune_dedupe")
def prune_dedupe() -> int:
    return sweeps.prune_dedupe_once(db.get_engine(db.SWEEPS), get_settings())


@app.task(name="awooop.sweeps.retention")
def retention() -> dict[str, int]:
    return sweeps.retention_once(db.get_engine(db.SWEEPS), get_settings())


@app.task(name="awooop.sweeps.fire_due_timers")
def fire_due_timers() -> int:
    fired = sweeps.fire_due_timers_once(db.get_engine(db.SWEEPS), get_settings())
    return runs.enqueue([t.run_id for t in fired])


@app.task(name="awooop.sweeps.start_scheduled")
def start_scheduled() -> dict[str, int]:
    swept = schedules.schedule_once(db.get_engine(db.SWEEPS), get_settings())
    runs.enqueue(swept.admitted)
    return {
        "admitted": len(swept.admitted),
        "late": len(swept.late),
        "over_quota": len(swept.over_quota),
    }
