"""Cluster scenario 5 — slow links: a worker host's connections delayed and stalled, at the
default lease and heartbeat.

Every connection of ``w1`` — to PostgreSQL, to Redis, to the recorder — goes through a proxy
that holds each chunk, each way, 100 ms ± 50 ms (uniform), and now and then stalls every
connection open at that moment for 2–8 s (new connections get through, slowly). The lease
and heartbeat are the defaults (300 s / 30 s, the keeper giving up on a renewal after 5 s
and retrying on a fresh connection), and so is worker liveness (renewed every 5 s, dead
after 20 s); the reaper runs every 3 s, so a lease or liveness falsely lost would be acted
on at once.

While runs arrive at a steady rate for :data:`WINDOW` seconds, from PostgreSQL: everything
completes; no false lease loss — the reaper took no run back, and every claim of a run but
its first follows that run's own worker handing it back (a step whose downstream call timed
out in a stall is retried with back-off: the run goes back to PENDING and is claimed again);
``w1`` did its part; no step completed twice; one effect per effect id at the recorder (a
retried step's repeated call is deduplicated by its key, and only runs handed back repeat
one).
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.cluster import checks as cluster_checks
from tests.cluster.suite import SUITE
from tests.support.timings import production_ratios, seconds

WINDOW = SUITE.scaled(120, least=30)  # seconds of arrivals, delays and stalls
RATE = 4.0  # runs per second
DELAY, JITTER = 0.100, 0.050
STALL_SECONDS = (2.0, 8.0)
STALL_EVERY = (5.0, 15.0)
# Production's lease, heartbeat and liveness settings themselves; the reaper alone passes more
# often than production's (every 3 s, not 60 s), so that a falsely lost lease or liveness
# would be acted on at once, within the window.
DEFAULT_TIMINGS = {**production_ratios(1.0), "AWOOOP_REAPER_INTERVAL_SECONDS": "3"}


@pytest.mark.timeout(1200)
def test_slow_and_stalling_links_complete_everything_without_false_lease_loss(
    open_cluster, figures
):
    figures.scenario("5", "Slow links: delay, jitter and stalls on a worker host")
    with open_cluster(timings=DEFAULT_TIMINGS) as cluster:
        links = cluster.links("database", "redis", "recorder")
        stack = cluster.start(env={"w1": links.env})
        links.delay(DELAY, JITTER)
        rng = random.Random(5)
        provider = stack.provider(threads=4, redelivery_share=0.0, rate=RATE)
        runs = int(WINDOW * RATE)
        deliveries = [
            api_event(stack.project, stack.new_key("slow-link"), {"slow": 1.0} if i % 5 else {})
            for i in range(runs)
        ]

        # Given runs arriving steadily, when w1's open connections stall now and then
        feeder = threading.Thread(target=provider.deliver_all, args=(deliveries,))
        started = time.monotonic()
        feeder.start()
        stalls: list[float] = []
        while time.monotonic() - started < WINDOW:
            time.sleep(rng.uniform(*STALL_EVERY))
            length = rng.uniform(*STALL_SECONDS)
            links.stall()
            time.sleep(length)
            links.heal()
            stalls.append(length)
        feeder.join(timeout=600)
        run_ids = [d.run_id for d in deliveries]

        # Then everything completes, each run claimed once
        checks.wait_terminal(stack.engine, run_ids, 600)
        done_s = time.monotonic() - started
        claims = checks.claims_per_run(stack.engine)
        reaped = checks.rows(
            stack.engine, "SELECT count(*) AS n FROM awooop_run_event WHERE trigger = 'reaper'"
        )[0]["n"]
        handed_back = {
            r["run_id"]: r["n"]
            for r in checks.rows(
                stack.engine,
                "SELECT run_id::text, count(*) AS n FROM awooop_run_event WHERE trigger = 'worker'"
                " AND from_status = 'RUNNING' AND to_status = 'PENDING' GROUP BY 1",
            )
        }
        unexplained = {r: n for r, n in claims.items() if n != 1 + handed_back.get(r, 0)}
        repeated_runs = {k.split(":", 1)[0] for k in stack.recorder.repeated()}
        by_host = cluster_checks.runs_by_host(stack.engine)
        doubles = checks.double_completions(stack.engine)
        effects = checks.effects(stack.engine, stack.recorder)
        counts = checks.status_counts(stack.engine)
        w1 = stack.worker("w1")
        figures.update(
            {
                "runs": runs,
                "delay_each_way_ms": f"{DELAY * 1000:.0f} ± {JITTER * 1000:.0f}",
                "lease_ttl_s": seconds(DEFAULT_TIMINGS, "lease_ttl_seconds"),
                "heartbeat_s": seconds(DEFAULT_TIMINGS, "heartbeat_interval_seconds"),
                "stalls": len(stalls),
                "stalled_s_total": round(sum(stalls), 1),
                "longest_stall_s": round(max(stalls, default=0), 1),
                "chunks_delayed": sum(p.delayed_chunks for p in links.proxies.values()),
                "w1_connections_opened": {k: p.accepted for k, p in links.proxies.items()},
                "w1_keeper_connections_abandoned": len(w1.actions("db_connection_abandoned")),
                "w1_lease_renewals_failed": len(w1.actions("lease_renew_failed")),
                "all_done_after_s": round(done_s, 1),
                "runs_by_worker_host": by_host,
                "claims_per_run_max": max(claims.values(), default=0),
                "runs_handed_back_by_their_worker": len(handed_back),
                "claims_not_after_a_hand_back": len(unexplained),
                "runs_reaped": reaped,
                "w1_lease_lost_reports": len(w1.actions("lease_lost")),
                "attempts_histogram": checks.attempts_histogram(stack.engine),
                "runs_by_status": counts,
                "steps_completed_twice": len(doubles),
                **provider.figures(),
                **effects.figures,
            }
        )

        assert counts == {"COMPLETED/COMPLETED": runs}
        assert len(claims) == runs and unexplained == {}, f"a lease was lost: {unexplained}"
        assert reaped == 0
        assert by_host.get("w1", 0) > 0, "w1 did none of the work"
        assert doubles == []
        assert effects.missing == [] and effects.unknown == []
        assert repeated_runs <= set(handed_back)
