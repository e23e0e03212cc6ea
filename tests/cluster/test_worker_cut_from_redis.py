"""Cluster scenario 3 — a worker host cut from Redis only.

``w1`` reaches Redis through a proxy of its own (its database and recorder connections go
straight over the bridge). While ``w1`` holds runs with slow steps, the proxy stops
forwarding (a partition between ``w1`` and Redis only: nothing is closed, nothing arrives).

- ``w1`` finishes what it holds: PostgreSQL is the truth, and a run needs no broker to
  complete — each run it held is completed by ``w1`` itself.
- New work flows to ``w2``: every step of every run admitted during the cut is written by
  ``w2``.
- When Redis is back, the connections the cut froze are reset (as a stateful firewall that
  forgot them, or a restarted Redis, would do), so ``w1`` must reconnect by itself: new runs
  arrive a few at a time until ``w1`` completes a step of one, within
  :data:`BACK_TO_WORK_BOUND` — the same processes, not restarted.

All COMPLETED, no step completed twice, one effect per effect id at the recorder.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.cluster import checks as cluster_checks
from tests.cluster.suite import SUITE

SLOW_RUNS = SUITE.scaled(8, least=6)
SLOW_SECONDS = 4.0
DURING = SUITE.scaled(200, least=40)  # runs admitted while w1 is cut from Redis
CUT_AT_LEAST = 15.0
BACK_TO_WORK_BOUND = 120.0


@pytest.mark.timeout(900)
def test_worker_cut_from_redis_finishes_its_runs_and_reconnects_by_itself(cluster, figures):
    figures.scenario("3", "A worker host cut from Redis only")
    links = cluster.links("redis")
    stack = cluster.start(env={"w1": links.env})
    cut = stack.worker("w1")
    pids_before = (cut.pid, cut.generation)
    provider = stack.provider(threads=4, redelivery_share=0.0)

    # Given w1 in the middle of slow steps
    slow = [
        api_event(stack.project, stack.new_key("slow"), {"slow": SLOW_SECONDS})
        for _ in range(SLOW_RUNS)
    ]
    provider.deliver_all(slow)
    stack.wait_holding(cut, 2)

    # When it is cut from Redis (and only from Redis)
    links.partition()
    cut_at = time.monotonic()
    held = checks.held_by(stack.engine, cut.worker_id_prefixes())
    during = [api_event(stack.project, stack.new_key("during"), {}) for _ in range(DURING)]
    feeder = threading.Thread(target=provider.deliver_all, args=(during,), name="feeder")
    feeder.start()

    # Then it finishes what it holds, and new work flows to w2
    held_done_s = checks.wait_terminal(stack.engine, held, 60)
    feeder.join(timeout=300)
    during_ids = [d.run_id for d in during]
    checks.wait_terminal(stack.engine, during_ids, 300)
    during_done_s = time.monotonic() - cut_at
    time.sleep(max(0.0, cut_at + CUT_AT_LEAST - time.monotonic()))
    held_finishers = cluster_checks.runs_by_host(stack.engine, held)
    during_by_host = cluster_checks.steps_by_host(stack.engine, during_ids)
    cut_s = time.monotonic() - cut_at

    # And when Redis is back (its frozen connections reset), w1 reconnects by itself
    links.heal(reset=True)
    healed_at = time.monotonic()
    fresh, back_after = cluster_checks.back_to_work(
        stack, provider, "w1", healed_at, BACK_TO_WORK_BOUND
    )
    fresh_ids = [d.run_id for d in fresh]
    checks.wait_terminal(stack.engine, fresh_ids, 180)
    checks.wait_terminal(stack.engine, None, 120)
    doubles = checks.double_completions(stack.engine)
    effects = checks.effects(stack.engine, stack.recorder)
    counts = checks.status_counts(stack.engine)
    total = SLOW_RUNS + DURING + len(fresh)

    figures.update(
        {
            "runs": total,
            "runs_held_by_w1_when_cut": len(held),
            "held_runs_completed_by_host": held_finishers,
            "held_runs_done_after_s": round(held_done_s, 1),
            "runs_admitted_during_cut": DURING,
            "runs_admitted_during_cut_done_after_s": round(during_done_s, 1),
            "steps_of_runs_admitted_during_cut_by_host": during_by_host,
            "cut_s": round(cut_s, 1),
            "redis_connections_reset_at_heal": links["redis"].reset_links,
            "w1_back_to_work_after_heal_s": back_after and round(back_after, 1),
            "new_runs_after_heal": len(fresh),
            "new_run_steps_by_host": cluster_checks.steps_by_host(stack.engine, fresh_ids),
            "w1_restarted": (cut.pid, cut.generation) != pids_before,
            "runs_by_status": counts,
            "steps_completed_twice": len(doubles),
            **provider.figures(),
            **effects.figures,
        }
    )

    assert held_finishers == {"w1": len(held)}, "w1 did not finish what it held"
    assert back_after is not None, f"w1 completed no new step {BACK_TO_WORK_BOUND:.0f} s later"
    assert set(during_by_host) == {"w2"}, "w1 took work while cut from Redis"
    assert (cut.pid, cut.generation) == pids_before and cut.alive, "w1 was restarted"
    assert doubles == []
    assert effects.missing == [] and effects.unknown == []
    assert counts == {"COMPLETED/COMPLETED": total}
