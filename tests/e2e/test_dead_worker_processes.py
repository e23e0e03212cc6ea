"""A dead worker loses its runs quickly, a live one never does — real processes.

The crash tests run with the DEFAULT lease, heartbeat, reaper and liveness timings (only the
database and the broker are the test's own): a SIGKILLed worker's run must be RUNNING on
another worker within 90 s, where the 300 s lease alone would take five minutes or more.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from awooop.config import Settings
from awooop.tasks import runs as run_tasks
from tests.support import db
from tests.support import runs as test_runs
from tests.support.processes import Process, Stack, wait_until

pytestmark = pytest.mark.slow

TAKEOVER_LIMIT = 90.0
# The stack fixture shortens these for other tests; the crash tests use the defaults.
TIMINGS = (
    "AWOOOP_LEASE_TTL_SECONDS",
    "AWOOOP_HEARTBEAT_INTERVAL_SECONDS",
    "AWOOOP_REAPER_INTERVAL_SECONDS",
    "AWOOOP_ORPHAN_INTERVAL_SECONDS",
    "AWOOOP_ORPHAN_AFTER_SECONDS",
    "AWOOOP_TIMER_INTERVAL_SECONDS",
    "AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS",
    "AWOOOP_WORKER_DEAD_AFTER_SECONDS",
    "AWOOOP_WORKER_BELIEF_MARGIN_SECONDS",
    "AWOOOP_WORKER_WATCH_INTERVAL_SECONDS",
)


def default_timings(stack: Stack) -> None:
    for name in TIMINGS:
        stack.env.pop(name, None)


def parent_pid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError(f"no parent of {pid}")


def holder(engine, run_id) -> tuple[str, int]:
    """The worker_id holding the run and the pid in it (host:pid:nonce)."""
    worker_id = db.run(engine, run_id)["worker_id"]
    return worker_id, int(worker_id.split(":")[1])


def start_crash_run(stack: Stack, engine, project, tmp_path):
    """Two run workers, the maintenance worker and beat; a run blocked mid-step on one of
    them. Returns the run, its holder's worker_id and pool-child pid, and that worker."""
    default_timings(stack)
    marker = tmp_path / "step-started"
    run_id = test_runs.admit(engine, project["project_id"], "test-crash", {"marker": str(marker)})
    workers = [stack.worker("worker-a"), stack.worker("worker-b")]
    stack.worker("maintenance", queues="maintenance")
    stack.beat()
    run_tasks.enqueue([run_id])
    wait_until(marker.exists, 30, "the blocking step to start")
    worker_id, child = holder(engine, run_id)
    assert db.run(engine, run_id)["status"] == "RUNNING"
    victim: Process = next(w for w in workers if w.popen.pid == parent_pid(child))
    # The keeper has announced the holder: its liveness row exists.
    wait_until(
        lambda: db.count(engine, "awooop_worker", "worker_id = :w", w=worker_id),
        10,
        "the holder's liveness row",
    )
    return run_id, worker_id, child, victim


def db_now(engine):
    return db.rows(engine, "SELECT now() AS now")[0]["now"]


def assert_taken_over(engine, run_id, dead_worker_id: str, killed_at) -> float:
    """The run was claimed (RUNNING) by another worker within the limit of ``killed_at`` (the
    database clock), then completed. The claim's history row is what is waited for: the
    second attempt's steps take milliseconds, too short a RUNNING to catch by polling."""

    def claimed_elsewhere() -> list[dict]:
        return [
            e
            for e in db.events(engine, run_id)
            if (e["trigger"], e["to_status"]) == ("worker", "RUNNING")
            and e["actor"] != dead_worker_id
        ]

    [claim] = wait_until(
        claimed_elsewhere, TAKEOVER_LIMIT, "the run to be RUNNING on another worker"
    )
    took = (claim["at"] - killed_at).total_seconds()
    print(f"takeover after SIGKILL: {took:.1f} s (default settings: {_defaults()})")

    wait_until(lambda: db.run(engine, run_id)["status"] == "COMPLETED", 60, "the run to complete")
    run = db.run(engine, run_id)
    assert run["attempt_count"] == 2
    [reaped] = [e for e in db.events(engine, run_id) if e["trigger"] == "reaper"]
    assert reaped["to_status"] == "PENDING"
    assert reaped["detail"]["reason"] == "worker_dead"
    assert reaped["detail"]["lost_worker_id"] == dead_worker_id
    # The step ran again with the same effect id: at-least-once, not a retry of the step.
    block = [e for e in run["saga_steps"] if e["step"] == "block"]
    assert len(block) == 1 and block[0]["claim"] == 2
    return took


def _defaults() -> str:
    s = Settings()
    return (
        f"lease {s.lease_ttl_seconds:g} s, reaper every {s.reaper_interval_seconds:g} s, "
        f"liveness every {s.worker_liveness_interval_seconds:g} s, "
        f"watched every {s.worker_watch_interval_seconds:g} s, "
        f"dead after {s.worker_dead_after_seconds:g} s"
    )


@pytest.mark.timeout(300)
def test_a_sigkilled_pool_childs_run_is_running_on_another_worker_within_90_s(
    stack, engine, project, tmp_path
):
    # Given a run blocked mid-step in worker A's pool child, default timings
    run_id, worker_id, child, _ = start_crash_run(stack, engine, project, tmp_path)

    # When that pool child is SIGKILLed (the worker's parent lives on)
    os.kill(child, signal.SIGKILL)
    killed_at = db_now(engine)

    # Then another worker process holds it within 90 s and completes it
    took = assert_taken_over(engine, run_id, worker_id, killed_at)
    assert took < TAKEOVER_LIMIT


@pytest.mark.timeout(300)
def test_a_sigkilled_workers_run_is_running_on_another_worker_within_90_s(
    stack, engine, project, tmp_path
):
    # Given a run blocked mid-step on worker A, default timings
    run_id, worker_id, _, victim = start_crash_run(stack, engine, project, tmp_path)

    # When the whole worker A (parent and pool child) is SIGKILLed, as a crashed host dies
    victim.kill()
    killed_at = db_now(engine)

    # Then worker B holds it within 90 s and completes it
    took = assert_taken_over(engine, run_id, worker_id, killed_at)
    assert took < TAKEOVER_LIMIT


def test_a_live_worker_whose_step_outlives_several_lease_ttls_is_never_taken_over(
    stack, engine, project, tmp_path
):
    # Given a 3 s lease renewed every 1 s, liveness every 1 s, dead after 3 s (believed for
    # 2.5 s after a beat), liveness watched every 0.5 s, reaper every 2 s
    stack.env["AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS"] = "1"
    stack.env["AWOOOP_WORKER_DEAD_AFTER_SECONDS"] = "3"
    stack.env["AWOOOP_WORKER_BELIEF_MARGIN_SECONDS"] = "0.5"
    stack.env["AWOOOP_WORKER_WATCH_INTERVAL_SECONDS"] = "0.5"
    ttl = float(stack.env["AWOOOP_LEASE_TTL_SECONDS"])
    log = tmp_path / "executions"
    seconds = 4 * ttl
    run_id = test_runs.admit(
        engine, project["project_id"], "test-slow", {"log": str(log), "seconds": seconds}
    )
    stack.worker("worker-a")
    stack.worker("worker-b")
    # (at DEBUG, where Celery's line about each sweep pass is logged)
    maintenance = stack.worker("maintenance", queues="maintenance", loglevel="DEBUG")
    stack.beat()

    # When its step runs for four lease TTLs (and four dead-after thresholds)
    run_tasks.enqueue([run_id])
    wait_until(log.exists, 30, "the slow step to start")
    worker_id, _ = holder(engine, run_id)
    wait_until(
        lambda: db.run(engine, run_id)["status"] == "COMPLETED",
        seconds + 30,
        "the run to complete",
    )

    # Then it ran once, under one claim, while the reaper passed again and again
    run = db.run(engine, run_id)
    assert run["attempt_count"] == 1
    assert len(log.read_text().splitlines()) == 1
    assert [e for e in db.events(engine, run_id) if e["trigger"] == "reaper"] == []
    # (watched every 0.5 s for `seconds`: about 2 x seconds passes)
    assert maintenance.log().count("awooop.sweeps.watch_workers[") >= seconds
    [liveness] = db.rows(engine, "SELECT * FROM awooop_worker WHERE worker_id = :w", w=worker_id)
    assert (liveness["seen_at"] - liveness["started_at"]).total_seconds() >= seconds - 1
