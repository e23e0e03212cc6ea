"""Cluster scenario 11 — the Redis master SIGKILLed under load; Redis Sentinel fails over.

Redis runs on ``r1`` (the master), ``r2`` and ``r3`` (its replicas), with a sentinel on each
(quorum 2, a master down after 1 s). Web, workers, beat and the rate limiter are given the
``sentinel://r1;r2;r3`` URL and ``AWOOOP_BROKER_SENTINEL_MASTER``; the project has an
ingress rate limit, so every admission also counts in Redis.

While events stream in and each worker host holds a slow run (its message unacknowledged),
the master's redis-server is SIGKILLed (its host and sentinel stay). What the master had not
replicated is gone — queued messages included — and until the sentinels promote a replica
nothing can be pushed.

- Nothing acknowledged is lost: every event is answered 200/202 (no 5xx: admission commits
  in PostgreSQL and does not wait for the broker), every 202 has its run, every run
  COMPLETED — what the broker lost, the orphan sweep sends again.
- ``/readyz`` answers only its documented 503 (``E-UNAVAILABLE-001``, broker unreachable),
  and 200 again after the failover.
- Beat goes on: beat sends, and the maintenance worker runs, sweeps again after the failover
  (``awooop_beat_sent_total``, ``awooop_sweep_passes_total``).
- Every consumer receives again: new runs arrive until each worker host completes a step of
  one admitted after the failover — the same processes, not restarted (kombu's Sentinel
  channel stopped a worker that held a message when the master died:
  :mod:`awooop.tasks.redis_transport`).
- The rate limiter counts on the master the sentinels name.

Figures: the failover, the readiness gap, when each worker and beat were back, the whole
recovery, and what the orphan sweep re-sent.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
import requests

from awooop import db
from awooop.store import projects
from tests.chaos import checks
from tests.chaos.providers import api_event
from tests.cluster import checks as cluster_checks
from tests.cluster.suite import SUITE
from tests.support import metrics
from tests.support import sentinel as ha
from tests.support.processes import wait_until

BEFORE = SUITE.scaled(100, least=30)
STREAM = SUITE.scaled(900, least=150)  # events arriving across the kill
RATE = 15.0  # events a second while the stream flows
KILL_AFTER = 0.25  # of the stream answered
INGRESS_LIMIT = 1_000_000  # per minute: counted, never reached
FAILOVER_BOUND = 60.0
BACK_TO_WORK_BOUND = 120.0
BEAT_BOUND = 60.0
SLOW_RUNS = 4  # held by the workers when the master dies: their messages unacknowledged
SLOW_SECONDS = 6.0
COUNTED = 20  # events after the recovery, counted by the rate limiter on the master


class Readiness:
    """Asks ``/readyz`` every 0.2 s from a thread; each answer's time and status."""

    def __init__(self, base_url: str) -> None:
        self.url = base_url + "/readyz"
        self.answers: list[tuple[float, int | None, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="readiness", daemon=True)

    def _loop(self) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            at = time.monotonic()
            try:
                response = session.get(self.url, timeout=10)
                code = response.json().get("error", {}).get("code", "")
                self.answers.append((at, response.status_code, code))
            except requests.RequestException:
                self.answers.append((at, None, ""))
                session = requests.Session()
            self._stop.wait(0.2)

    def __enter__(self) -> Readiness:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def unready(self) -> list[tuple[float, int | None, str]]:
        return [a for a in self.answers if a[1] != 200]

    def ready_again_after(self, since: float) -> float | None:
        """Seconds from ``since`` to the first 200 after the last answer that was not one."""
        unready = [a[0] for a in self.unready() if a[0] >= since]
        after = [a[0] for a in self.answers if a[1] == 200 and a[0] > max(unready, default=since)]
        return after[0] - since if after else None


def _counters(stack) -> dict[str, float]:
    text = requests.get(stack.web_url + "/metrics", timeout=30).text
    return {
        "beat_sent": metrics.sample(
            text, "awooop_beat_sent_total", task="awooop.sweeps.resend_orphans"
        )
        or 0.0,
        "orphan_passes": metrics.sample(
            text, "awooop_sweep_passes_total", sweep="resend_orphans", outcome="succeeded"
        )
        or 0.0,
    }


def _rate_limit_delete(server, project_id: str) -> None:
    """Empty the limiter's window on ``server`` (a master: its replicas follow)."""
    client = redis.Redis(server.host, server.port, socket_timeout=5)
    try:
        client.delete(f"awooop:rate:{project_id}:ingress")
    finally:
        client.close()


def _rate_limit_count(server, project_id: str) -> int:
    client = redis.Redis(server.host, server.port, socket_timeout=5)
    try:
        return int(client.get(f"awooop:rate:{project_id}:ingress") or 0)
    finally:
        client.close()


@pytest.mark.timeout(900)
def test_redis_master_killed_sentinel_fails_over_and_nothing_is_lost(
    open_cluster, redis_sentinels, figures
):
    figures.scenario("11", "The Redis master killed under load; Sentinel fails over")
    group = redis_sentinels
    settings = {
        "AWOOOP_BROKER_SENTINEL_MASTER": ha.MASTER_NAME,
        "AWOOOP_RATE_LIMIT_REDIS_URL": group.url,
    }
    with open_cluster(broker_url=group.url, timings=settings) as cluster:
        with db.transaction(cluster.engine) as conn:
            projects.set_limits(
                conn, cluster.project["project_id"], {"ingress_per_minute": INGRESS_LIMIT}
            )
        stack = cluster.start()
        project_id = stack.project["project_id"]
        workers = {name: stack.worker(name) for name in ("w1", "w2")}
        pids_before = {name: (w.pid, w.generation) for name, w in workers.items()}

        # Given admission and execution working end to end through the sentinels
        before = stack.provider(threads=8, redelivery_share=0.0).deliver_all(
            [api_event(stack.project, stack.new_key("before"), {}) for _ in range(BEFORE)]
        )
        checks.wait_terminal(stack.engine, [d.run_id for d in before], 120)
        first_master = group.master()
        assert _rate_limit_count(first_master, project_id) > 0

        with Readiness(stack.web_url) as readiness:
            # When the master is SIGKILLed while events stream in
            provider = stack.provider(threads=8, redelivery_share=0.1, rate=RATE, timeout=30)
            stream = [api_event(stack.project, stack.new_key("stream"), {}) for _ in range(STREAM)]
            feeder = threading.Thread(target=provider.deliver_all, args=(stream,), name="feeder")
            feeder.start()
            wait_until(
                lambda: sum(provider.answers.values()) >= STREAM * KILL_AFTER,
                120,
                "a quarter of the stream to be answered",
            )
            slow = [
                api_event(stack.project, stack.new_key("slow"), {"slow": SLOW_SECONDS})
                for _ in range(SLOW_RUNS)
            ]
            stack.provider(threads=4, redelivery_share=0.0).deliver_all(slow)
            for worker in workers.values():
                stack.wait_holding(worker, 1)
            held = {
                name: checks.held_by(stack.engine, w.worker_id_prefixes())
                for name, w in workers.items()
            }
            killed = group.kill_master()
            killed_at = time.monotonic()
            promoted = group.wait_failover(killed, FAILOVER_BOUND)
            failover_s = time.monotonic() - killed_at

            # Then beat sends, and the maintenance worker runs, sweeps again
            at_failover = _counters(stack)
            wait_until(
                lambda: all(
                    _counters(stack)[k] >= at_failover[k] + 2
                    for k in ("beat_sent", "orphan_passes")
                ),
                BEAT_BOUND,
                "beat and the maintenance worker to run the orphan sweep twice more",
            )
            beat_again_s = time.monotonic() - killed_at

            # And every worker host consumes again
            back: dict[str, float | None] = {}
            fresh = []
            after_provider = stack.provider(threads=4, redelivery_share=0.0)
            for name in workers:
                runs, back[name] = cluster_checks.back_to_work(
                    stack, after_provider, name, killed_at, BACK_TO_WORK_BOUND
                )
                fresh += runs
            feeder.join(timeout=300)
            stream_ids = [d.run_id for d in stream]
            fresh_ids = [d.run_id for d in fresh]
            slow_ids = [d.run_id for d in slow]
            checks.wait_terminal(stack.engine, stream_ids + fresh_ids + slow_ids, 300)
            all_done_s = time.monotonic() - killed_at
            wait_until(
                lambda: readiness.ready_again_after(killed_at) is not None,
                60,
                "/readyz to answer 200 after the failover",
            )

            # And the rate limiter counts on the master the sentinels name now (the one
            # promoted, or the next if a loaded machine made them fail over again): its
            # window, emptied now, counts what comes next
            master_now = group.current_master(FAILOVER_BOUND)
            _rate_limit_delete(master_now, project_id)
            counted = stack.provider(threads=4, redelivery_share=0.0).deliver_all(
                [api_event(stack.project, stack.new_key("counted"), {}) for _ in range(COUNTED)]
            )
            fresh += counted
            checks.wait_terminal(stack.engine, [d.run_id for d in counted], 120)
            master_at_count = group.current_master(FAILOVER_BOUND)
            limiter_on_master = _rate_limit_count(master_at_count, project_id)
            failed_over_again = master_at_count is not promoted

        checks.wait_terminal(stack.engine, None, 120)
        doubles = checks.double_completions(stack.engine)
        effects = checks.effects(stack.engine, stack.recorder)
        counts = checks.status_counts(stack.engine)
        total = BEFORE + STREAM + SLOW_RUNS + len(fresh)
        resent = sum(
            record.get("count", 0)
            for w in stack.maintenance_workers()
            for record in w.actions("orphans_resent")
        )
        stream_figures = provider.figures()
        unready = readiness.unready()
        ready_again = readiness.ready_again_after(killed_at)

        figures.update(
            {
                "runs": total,
                "events_streamed": STREAM,
                "stream_rate_per_s": RATE,
                "runs_held_by_each_worker_at_kill": {n: len(r) for n, r in held.items()},
                "failover_s": round(failover_s, 1),
                "sentinel_down_after_ms": ha.DOWN_AFTER_MS,
                "readyz_503_answers": len(unready),
                "readyz_ready_again_after_kill_s": ready_again and round(ready_again, 1),
                "beat_and_orphan_sweep_again_after_kill_s": round(beat_again_s, 1),
                "w1_back_to_work_after_kill_s": back["w1"] and round(back["w1"], 1),
                "w2_back_to_work_after_kill_s": back["w2"] and round(back["w2"], 1),
                "all_done_after_kill_s": round(all_done_s, 1),
                "runs_resent_by_orphan_sweep": resent,
                "events_counted_by_rate_limiter_on_the_master": f"{limiter_on_master} of {COUNTED}",
                "sentinels_failed_over_again": failed_over_again,
                "sentinel_master_switches": group.switches(),
                "stream_http_answers": stream_figures["http_answers"],
                "stream_connection_errors": stream_figures["connection_errors"],
                "stream_admission_p50_ms": stream_figures["admission_p50_ms"],
                "stream_admission_p99_ms": stream_figures["admission_p99_ms"],
                "workers_restarted": sum(
                    (w.pid, w.generation) != pids_before[n] for n, w in workers.items()
                ),
                "runs_by_status": counts,
                "attempts_histogram": checks.attempts_histogram(stack.engine),
                "steps_completed_twice": len(doubles),
                **effects.figures,
            }
        )

        assert stream_figures["http_5xx"] == 0 and stream_figures["connection_errors"] == 0
        assert set(stream_figures["http_answers"]) <= {200, 202}
        assert provider.redelivery_mismatches == [] and provider.gave_up == []
        assert all(stream_ids) and len(set(stream_ids)) == STREAM
        assert {(status, code) for _, status, code in unready} <= {(503, "E-UNAVAILABLE-001")}
        assert ready_again is not None, "/readyz did not answer 200 after the failover"
        assert back["w1"] is not None and back["w2"] is not None, back
        assert all((w.pid, w.generation) == pids_before[n] for n, w in workers.items())
        assert limiter_on_master > 0, "the rate limiter did not count on the master"
        assert doubles == []
        assert effects.missing == [] and effects.unknown == []
        assert counts == {"COMPLETED/COMPLETED": total}
