"""Scenario 1 — worker SIGKILL storm.

1,000 runs of ``chaos-saga`` are delivered over HTTP, 10 a second, by a provider-like client
(retries on 5xx / connection errors, 10 % exact redeliveries) while 50 SIGKILLs hit the two
workers at random moments: about a third kill a worker's parent with its pool (restarted at
once, the way an orchestrator restarts a container), the rest kill one prefork child (Celery's
parent starts another). 5 % of the runs have a slow step (1.5 s), 5 % are rejected and compensate.

Then, from PostgreSQL and the recorder:
- every event has exactly one run, and every redelivery was answered with it;
- every run is terminal within lease + reaper + 30 s of the last kill;
- no step completed twice in any journal;
- every effect a journal shows SUCCEEDED was recorded, under its effect id, and no effect
  was recorded for a run that does not exist; keys the recorder saw more than once (a
  handler killed after its effect, before its record) are reported.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.chaos.report import scaled
from tests.chaos.stack import LEASE_TTL, REAPER_INTERVAL
from tests.support.processes import wait_until

RUNS = scaled(1000, least=50)
KILLS = scaled(50, least=5)
PARENT_SHARE = 0.3
# Events per second: the storm lasts about RUNS / RATE seconds. A killed parent is down for
# the seconds Celery takes to start again, so at 20 a second (a kill a second) the workers
# spent most of the storm starting: 800 of the 1,000 runs were still queued at the last kill,
# and the time to drain them — 32 s on a quiet machine, more than the bound on a busy one —
# measured the backlog more than the recovery. At 10 a second (a kill every two seconds) the
# workers keep up between kills.
ADMISSION_RATE = 10.0
BOUND_AFTER_LAST_KILL = LEASE_TTL + REAPER_INTERVAL + 30


@pytest.mark.timeout(900)
def test_worker_sigkill_storm_loses_and_repeats_nothing(chaos_stack, figures):
    figures.scenario("1", "Worker SIGKILL storm")
    stack = chaos_stack.start()
    rng = random.Random(1)
    workers = stack.run_workers()

    deliveries = []
    for i in range(RUNS):
        payload = {"n": i}
        if i % 20 == 7:
            payload["slow"] = 1.5
        if i % 20 == 13:
            payload["reject"] = True
        deliveries.append(api_event(stack.project, stack.new_key("storm"), payload))

    # The kills: random moments over the delivery window, parents restarted at once.
    window = RUNS / ADMISSION_RATE
    moments = sorted(rng.uniform(1.0, window) for _ in range(KILLS))
    kills: list[tuple[float, str, str]] = []
    last_kill = [0.0]
    backlog_at_last_kill = [0]

    def storm() -> None:
        started = time.monotonic()
        for moment in moments:
            time.sleep(max(0.0, started + moment - time.monotonic()))
            # A worker between a kill and its restart has no pool yet: hit the other one.
            alive = wait_until(
                lambda: [w for w in workers if w.alive and w.children()],
                120,
                "a worker with a pool to kill",
            )
            worker = rng.choice(alive)
            if rng.random() < PARENT_SHARE:
                worker.kill()  # the supervisor starts it again
                kills.append((time.monotonic() - started, worker.name, "parent"))
            else:
                worker.kill_child(rng)
                kills.append((time.monotonic() - started, worker.name, "child"))
            last_kill[0] = time.monotonic()
        backlog_at_last_kill[0] = len(checks.not_terminal(stack.engine))

    stack.supervise()
    killer = threading.Thread(target=storm, name="storm")
    provider = stack.provider(threads=8, redelivery_share=0.1, rate=ADMISSION_RATE)
    started = time.monotonic()
    killer.start()
    provider.deliver_all(deliveries)
    admitted_in = time.monotonic() - started
    killer.join(timeout=window + 300)
    assert not killer.is_alive()

    # Every run terminal within lease + reaper + 30 s of the last kill (asserted below; the
    # wait goes on past the bound so that a miss is measured and reported, not just seen).
    recovered_in = checks.wait_terminal(stack.engine, None, BOUND_AFTER_LAST_KILL + 120)
    since_last_kill = time.monotonic() - last_kill[0]
    total = time.monotonic() - started

    run_ids = {d.run_id for d in deliveries}
    counts = checks.status_counts(stack.engine)
    exhausted = checks.rows(
        stack.engine,
        "SELECT count(*) AS n FROM awooop_run_state WHERE failure_reason LIKE 'Max retry%'",
    )[0]["n"]
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)

    figures.update(
        {
            "runs": RUNS,
            "kills": len(kills),
            "kills_of_parents": sum(k[2] == "parent" for k in kills),
            "kills_of_prefork_children": sum(k[2] == "child" for k in kills),
            "worker_restarts": stack.revivals,
            "worker_exits_after_a_child_kill_at_start": sum(w.unexpected_exits for w in workers),
            "delivery_window_s": round(admitted_in, 1),
            "runs_not_terminal_at_last_kill": backlog_at_last_kill[0],
            "all_terminal_after_last_kill_s": round(since_last_kill, 1),
            "bound_after_last_kill_s": BOUND_AFTER_LAST_KILL,
            "waited_after_delivery_s": round(recovered_in, 1),
            "scenario_s": round(total, 1),
            "runs_by_status": counts,
            "runs_failed_attempts_exhausted": exhausted,
            "claims_per_run": checks.attempts_histogram(stack.engine),
            **provider.figures(),
            "steps_completed_twice": len(doubles),
            **effects.figures,
        }
    )

    # Exactly one run per event; redeliveries answered with it.
    assert len(run_ids) == RUNS and None not in run_ids
    assert checks.rows(stack.engine, "SELECT count(*) AS n FROM awooop_run_state")[0]["n"] == RUNS
    assert provider.redelivery_mismatches == []
    assert provider.gave_up == []
    assert since_last_kill <= BOUND_AFTER_LAST_KILL + 1
    # Rejected runs compensated; the others completed (or ran out of crash budget).
    assert set(counts) <= {"COMPLETED/COMPLETED", "FAILED/COMPENSATED", "FAILED/RUNNING"}
    assert counts.get("FAILED/COMPENSATED", 0) == sum(b"reject" in d.body for d in deliveries)
    assert doubles == []
    assert effects.missing == []
    assert effects.unknown == []
